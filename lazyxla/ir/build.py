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

Where checking is on, `ir/check.py` verifies that one signature always stands for one
structure (`structure` below, the key `op_node` interns).
"""
from __future__ import annotations

from typing import Any, Hashable, Optional, Sequence

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


class OpSignature:
    """A traced call's structural key, interned once, and the output avals it implies:
    what every node of that signature shares. `shape`/`dtype` are tuples, one entry per
    output, when `nout` > 0."""
    __slots__ = ("sig", "shape", "dtype", "nout")

    def __init__(self, key: Hashable, shape: tuple, dtype: Any, nout: int = 0) -> None:
        self.sig = intern_sig(key)
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


def op_node(op: Any, args: tuple, kwargs: Optional[dict], shape: tuple, dtype: Any, nout: int = 0) -> Node:
    """A computed node whose operands are the nodes among `args` and `kwargs` and whose
    signature is its `structure`."""
    inputs: list = []
    key = structure(op, args, kwargs, shape, dtype, nout, inputs)
    return Node(op, args, kwargs, tuple(inputs), shape, dtype, intern_sig(key), None, nout)


def call_node(program: Subprogram, operands: Sequence[Node]) -> Node:
    """The node computing `program(*operands)`; read its outputs with `getitem_node`."""
    return op_node(program, tuple(operands), None, program.out_shapes, program.out_dtypes,
                   len(program.out_shapes))


def call_outputs(program: Subprogram, operands: Sequence[Node]) -> list[Node]:
    """One CALL node of `program` and a GETITEM node per output, whose signatures the
    program interned once (a compiled forward has hundreds of outputs, every step)."""
    node = call_node(program, operands)
    return [Node(GETITEM, (node, i), None, (node,), shape, dtype, sig)
            for i, ((shape, dtype), sig) in enumerate(zip(program.out_avals, program.item_sigs))]


def getitem_node(node: Node, index: int) -> Node:
    """Output `index` of multi-output `node`."""
    shape, dtype = node.shape[index], node.dtype[index]
    return Node(GETITEM, (node, index), None, (node,), shape, dtype, intern_sig((GETITEM, index, shape, dtype)))


# (DATA, shape, dtype, storage dtype) -> its interned id: a DATA node is made for every
# upload and every graph output, so its key is interned through a table of its own
_DATA_SIGS = BoundedTable(SIG_TABLE_CAP // 2)


def data_node(data: Any) -> Node:
    """A device buffer (`runtime.device_data.DeviceData`) as a leaf: a parameter of the
    compiled graph. The buffer's storage dtype (a narrower one under a storage policy) is
    part of the signature: it is the compiled parameter's type."""
    key = (DATA, data.shape, data.dtype, data.stored_dtype)
    sid = _DATA_SIGS.get(key)
    if sid is None:
        sid = _DATA_SIGS.put(key, intern_sig(key))
    return Node(DATA, (), None, (), data.shape, data.dtype, sid, data)


_SCALAR_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool, complex: torch.complex128}


def scalar_node(value: Any, dtype: Optional[torch.dtype] = None) -> Node:
    """A runtime scalar operand, keyed by its dtype alone (never its value). Python floats
    travel as float64, ints as int64, complex numbers as complex128."""
    if dtype is None:
        dtype = _SCALAR_DTYPES[type(value)]
    return Node(SCALAR, (), None, (), (), dtype, intern_sig((SCALAR, dtype)), value)
