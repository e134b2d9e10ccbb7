"""Every IR node is made here, by a constructor that computes its signature from its parts.

A node's `sig` (ir/node.py) is what graph keys, and so the compile cache, compare: two
nodes with one signature must lower to the same computation. So the signature covers
the op, its static arguments, its operands' shapes and dtypes and its outputs' avals,
never data values. Nothing outside ir/ calls `Node(...)` (tests/test_ir_build.py checks
it), so no module assembles a signature tuple of its own. The constructors:

* `traced_node`, the tracer's per-op hot path. The tracer already builds the structural
  key of each call to look up shape inference (frontend/tracing.py: the op, operand
  shape/stride/dtype, static arguments, the types of lifted scalars) and keeps an
  `OpSignature` per key: the key interned once, with the output avals it implies.
  Making the node is then one object, with no second dict hit.
* `op_node`, every other computed node (casts, expands, barriers, sharding constraints,
  writes through views, CALL nodes): its key is made here from its arguments, operand
  nodes standing in by their shape and dtype, and its operands are the nodes among them.
* the leaves and elements: `data_node`, `scalar_node`, `getitem_node`; `call_outputs`
  for a CALL node with one GETITEM per output.

Every constructor but the tracer's takes its key from one builder, `signature`, which
knows each node kind's key (a traced call's is the tracer's, marked a `TracedKey`).
Where checking is on, `ir/check.py` verifies that every node's signature is the one the
builder gives it, or a traced key, and that one signature always stands for one structure.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import torch

from .bounded import BoundedTable
from .call import Subprogram
from .node import DATA, GETITEM, SCALAR, SIG_TABLE_CAP, Node, intern_sig


class _Operand:
    """Marks an operand's place in an `op_node` key (followed by its shape and dtype): no
    static argument and no traced key holds it, so keys of both kinds never meet."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "operand"


OPERAND = _Operand()


class TracedKey(tuple):
    """A traced call's key (frontend/tracing.py) as a signature: the tuple it is, marked
    so that the checker knows the builder did not make it (it cannot rebuild it: the key
    holds operand strides, which nodes do not)."""
    __slots__ = ()


class OpSignature:
    """A traced call's structural key, interned once, and the output avals it implies:
    what every node of that signature shares. `shape`/`dtype` are tuples, one entry per
    output, when `nout` > 0."""
    __slots__ = ("sig", "shape", "dtype", "nout")

    def __init__(self, key: tuple, shape: tuple, dtype: Any, nout: int = 0) -> None:
        self.sig = intern_sig(TracedKey(key))
        self.shape = shape
        self.dtype = dtype
        self.nout = nout


def traced_node(op: Any, args: tuple, kwargs: Optional[dict], inputs: tuple, signature: OpSignature) -> Node:
    """The node of one traced call: `signature` was interned from the call's key, which
    covers `op`, `args`/`kwargs` (operand nodes in place of tensors) and `inputs` (the
    operand nodes, flat, in argument order)."""
    return Node(op, args, kwargs, inputs, signature.shape, signature.dtype, signature.sig, None, signature.nout)


def _keyed(value: Any, inputs: list) -> Any:
    """`value` as it enters a signature, appending the operand nodes it holds to `inputs`:
    a node by its shape and dtype, a float by its bits (-0.0 and nan are values too), a
    device by its type (a graph runs on one device; the tracer keys devices so too)."""
    tp = type(value)
    if tp is Node:
        inputs.append(value)
        return (OPERAND, value.shape, value.dtype)
    if tp is tuple:
        return tuple([_keyed(v, inputs) for v in value])
    if tp is float:
        return (float, value.hex())
    if tp is torch.device:
        return value.type
    if tp is list:   # the program builder (compile/program.py) finds operands in tuples only
        raise TypeError("lazyxla: a node's list argument; pass a tuple")
    return value


def structure(op: Any, args: tuple, kwargs: Optional[dict], shape: Any, dtype: Any, nout: int,
              inputs: list) -> tuple:
    """What a signature stands for: `op` (a `Subprogram` by its key), the arguments with
    operand nodes by their avals, the output avals. Appends the operand nodes among
    `args` and `kwargs` (tuples searched) to `inputs`, in order."""
    head = ("call", op.key_id) if type(op) is Subprogram else op
    return (head, _keyed(args, inputs),
            tuple([(k, _keyed(v, inputs)) for k, v in kwargs.items()]) if kwargs else (), shape, dtype, nout)


def signature(op: Any, args: tuple, kwargs: Optional[dict], shape: Any, dtype: Any, nout: int,
              inputs: list, data: Any = None) -> tuple:
    """The one signature builder: the key a node of these parts has, by its kind; appends
    its operand nodes to `inputs`. Device data: its avals and storage dtype (the compiled
    parameter's type). A lifted scalar: its dtype, never its value. A GETITEM: the index
    and the item's avals (its source is keyed by its own signature). Any other node: its
    `structure`."""
    if op is DATA:
        return _data_key(shape, dtype, data.stored_dtype)
    if op is SCALAR:
        return (SCALAR, dtype)
    if op is GETITEM:
        inputs.append(args[0])
        return (GETITEM, args[1], shape, dtype)
    return structure(op, args, kwargs, shape, dtype, nout, inputs)


def node_signature(node: Node, inputs: list) -> tuple:
    """The key the builder gives `node` (ir/check.py holds it against the node's own)."""
    return signature(node.op, node.args, node.kwargs, node.shape, node.dtype, node.nout, inputs, node.data)


def op_node(op: Any, args: tuple, kwargs: Optional[dict], shape: tuple, dtype: Any, nout: int = 0) -> Node:
    """A computed node whose operands are the nodes among `args` and `kwargs` and whose
    signature is its `structure`."""
    inputs: list = []
    key = signature(op, args, kwargs, shape, dtype, nout, inputs)
    return Node(op, args, kwargs, tuple(inputs), shape, dtype, intern_sig(key), None, nout)


# a program's key id -> its operands' shapes and dtypes at its last call and that CALL node's
# signature: a compiled step calls the same programs on operands of the same avals every step,
# and comparing two lists costs far less than building and interning the key of a call with
# hundreds of operands
_CALL_SIGS = BoundedTable(SIG_TABLE_CAP // 16)


def call_node(program: Subprogram, operands: Sequence[Node]) -> Node:
    """The node computing `program(*operands)`; read its outputs with `getitem_node`. Its
    signature is `op_node`'s, which depends on the program and its operands' avals alone."""
    args = tuple(operands)
    shapes = [n.shape for n in args]
    dtypes = [n.dtype for n in args]
    known = _CALL_SIGS.get(program.key_id)
    if known is not None and known[0] == shapes and known[1] == dtypes:
        return Node(program, args, None, args, program.out_shapes, program.out_dtypes, known[2], None,
                    len(program.out_shapes))
    node = op_node(program, args, None, program.out_shapes, program.out_dtypes, len(program.out_shapes))
    _CALL_SIGS.put(program.key_id, (shapes, dtypes, node.sig))
    return node


# a program's key id -> the signatures of the GETITEM nodes reading its outputs, interned once:
# a compiled forward has hundreds of outputs (saved activations) and is called every step
_ITEM_SIGS = BoundedTable(SIG_TABLE_CAP // 16)


def call_outputs(program: Subprogram, operands: Sequence[Node]) -> list[Node]:
    """One CALL node of `program` and a GETITEM node per output."""
    node = call_node(program, operands)
    sigs = _ITEM_SIGS.get(program.key_id)
    if sigs is None:
        sigs = _ITEM_SIGS.put(program.key_id, tuple(
            intern_sig(signature(GETITEM, (node, i), None, shape, dtype, 0, []))
            for i, (shape, dtype) in enumerate(program.out_avals)))
    return [Node(GETITEM, (node, i), None, (node,), shape, dtype, sig)
            for i, ((shape, dtype), sig) in enumerate(zip(program.out_avals, sigs))]


def getitem_node(node: Node, index: int) -> Node:
    """Output `index` of multi-output `node`."""
    shape, dtype = node.shape[index], node.dtype[index]
    args = (node, index)
    return Node(GETITEM, args, None, (node,), shape, dtype, intern_sig(signature(GETITEM, args, None, shape, dtype, 0, [])))


def with_operands(node: Node, swap: Mapping[Node, Node]) -> Node:
    """`node` reading `swap[operand]` in place of each of its operands found in `swap` (the
    same value computed elsewhere: sync/crossing.py). The signature is `node`'s: it holds
    the operands' shapes and dtypes, which the replacements share, not their identity."""
    kwargs = {k: _swapped(v, swap) for k, v in node.kwargs.items()} if node.kwargs else node.kwargs
    new = Node(node.op, _swapped(node.args, swap), kwargs,
               tuple([swap.get(i, i) for i in node.inputs]), node.shape, node.dtype, node.sig, node.data, node.nout)
    origin = getattr(node, "origin", None)   # set only while provenance is on
    if origin is not None:
        new.origin = origin
    return new


def _swapped(value: Any, swap: Mapping[Node, Node]) -> Any:
    """`value` (an argument) with the nodes of `swap` replaced, searched where `_keyed`
    finds operands: the value itself and tuples."""
    tp = type(value)
    if tp is Node:
        return swap.get(value, value)
    if tp is tuple:
        return tuple([_swapped(v, swap) for v in value])
    return value


# (DATA, shape, dtype, storage dtype) -> its interned id: a DATA node is made for every
# upload and every graph output, so its key is interned through a table of its own
_DATA_SIGS = BoundedTable(SIG_TABLE_CAP // 2)


def data_node(data: Any, sig: Optional[int] = None) -> Node:
    """A device buffer (`runtime.device_data.DeviceData`) as a leaf: a parameter of the
    compiled graph. The buffer's storage dtype (a narrower one under a storage policy) is
    part of the signature: it is the compiled parameter's type. `sig`: the buffer's
    `data_sig`, where the caller keeps it (a graph's outputs, sync/install.py)."""
    if sig is None:
        sig = data_sig(data.shape, data.dtype, data.stored_dtype)
    return Node(DATA, (), None, (), data.shape, data.dtype, sig, data)


def _data_key(shape: tuple, dtype: Any, stored_dtype: Any) -> tuple:
    return (DATA, shape, dtype, stored_dtype)


def data_sig(shape: tuple, dtype: Any, stored_dtype: Any) -> int:
    """The signature of a DATA node of these avals and storage dtype."""
    key = _data_key(shape, dtype, stored_dtype)
    sid = _DATA_SIGS.get(key)
    if sid is None:
        sid = _DATA_SIGS.put(key, intern_sig(key))
    return sid


_SCALAR_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool, complex: torch.complex128}
# dtype -> the interned signature of its SCALAR nodes, as `data_sig` keeps DATA ones: a scalar
# is lifted per Python number an op takes (a foreach op's ScalarList: one per element a step)
_SCALAR_SIGS: dict = {}


def scalar_node(value: Any, dtype: Optional[torch.dtype] = None) -> Node:
    """A runtime scalar operand, keyed by its dtype alone (never its value). Python floats
    travel as float64, ints as int64, complex numbers as complex128."""
    if dtype is None:
        dtype = _SCALAR_DTYPES[type(value)]
    sig = _SCALAR_SIGS.get(dtype)
    if sig is None:
        sig = _SCALAR_SIGS[dtype] = intern_sig(signature(SCALAR, (), None, (), dtype, 0, []))
    return Node(SCALAR, (), None, (), (), dtype, sig, value)
