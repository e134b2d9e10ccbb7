"""The IR checker: a graph validated against the rules every node must keep.

A malformed node shows up late and far away: as a lowering error inside `jax.jit`, a
wrong value, or (a signature that stands for two structures) another graph's executable
taken from the compile cache. The checker names the node and the rule at once. It checks:

* every node: its avals well formed (a shape of ints and a dtype, or one per output when
  `nout` > 0) and its operands (`inputs`) exactly the nodes among its arguments, in order;
* leaves: DATA holds a buffer of the node's shape and dtype and no operands; SCALAR a
  Python number its dtype can hold, shape (), no operands;
* what the op's record states (`lowering` in ir/ops.py; an ATen op's schema: how many
  arguments, their names, which ones are tensors, how many outputs) and the internal ops'
  own rules: GETITEM reads an existing output of a multi-output node, a CALL node has its
  program's outputs, barriers, sharding constraints and view writes keep their operands'
  avals;
* signatures: a node's signature is the one ir/build.py's builder (`signature`) gives a
  node of its parts, or a traced call's key (the tracer's, which holds operand strides no
  node keeps); and one signature always stands for one structure (op, static arguments,
  operand and output avals), remembered across graphs while checking is on;
* a collected graph: topological order, parameters and scalars that match its leaves,
  outputs inside the order.

Run it with `LAZYXLA_CHECK_IR=1` (every collected graph, sync/collect.py), with
`lx.debug.check_ir()` (the pending IR now), or in tests (`--check-ir`, the `checked_ir`
fixture). Off, it costs one settings read per collected graph.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch

from .. import metrics
from .bounded import BoundedTable
from .build import TracedKey, node_signature
from .call import Subprogram
from .graph import Graph, positions
from .node import DATA, GETITEM, OPT_BARRIER, SCALAR, SHARDING_CONSTRAINT, SIG_TABLE_CAP, VIEW_SCATTER, Node, sig_of
from .ops import facts
from .walk import post_order


class MalformedIR(RuntimeError):
    """A node or graph that breaks an IR rule (a lazyxla bug, not a user error)."""


_LOWERINGS = facts("lowering")
_NUMBERS = (bool, int, float, complex)
# signature id -> the structure it stood for when first checked (ids are never reused)
_STRUCTURES = BoundedTable(SIG_TABLE_CAP)


def _describe(node: Node) -> str:
    op = f"call[{node.op.name}]" if type(node.op) is Subprogram else str(node.op)
    origin = getattr(node, "origin", None)
    return f"{op} (shape {node.shape}, dtype {node.dtype}, sig {node.sig}" + \
        (f", made at {origin})" if origin else ")")


def _fail(node: Node, rule: str) -> MalformedIR:
    return MalformedIR(f"lazyxla: malformed IR at node {_describe(node)}: {rule}. This is a lazyxla "
                       "bug; please report it with the op that made the node.")


def _check_avals(node: Node) -> None:
    def aval_ok(shape: Any, dtype: Any) -> bool:
        return (type(shape) is tuple and all(type(d) is int and d >= 0 for d in shape)
                and isinstance(dtype, torch.dtype))
    if type(node.nout) is not int or node.nout < 0:
        raise _fail(node, f"nout is {node.nout!r}, not a count")
    if not node.nout:
        if not aval_ok(node.shape, node.dtype):
            raise _fail(node, "its shape must be a tuple of sizes and its dtype a torch.dtype")
        return
    if not (type(node.shape) is tuple and type(node.dtype) is tuple
            and len(node.shape) == len(node.dtype) == node.nout):
        raise _fail(node, f"a node with {node.nout} outputs needs a shape and a dtype per output")
    for shape, dtype in zip(node.shape, node.dtype):
        if not (shape is None and dtype is None) and not aval_ok(shape, dtype):
            raise _fail(node, "each output's shape must be a tuple of sizes and its dtype a torch.dtype "
                              "(both None for an output not computed)")


def _check_structure(node: Node) -> None:
    """Operands: exactly the nodes among the arguments. Signature: the builder's (or a
    traced call's), and one structure per id."""
    found: list = []
    try:
        made_of = node_signature(node, found)
    except TypeError as e:
        raise _fail(node, str(e).removeprefix("lazyxla: ")) from None
    if len(found) != len(node.inputs) or any(a is not b for a, b in zip(found, node.inputs)):
        raise _fail(node, f"its inputs ({len(node.inputs)}) are not the {len(found)} nodes among its "
                          "arguments, in order")
    if type(node.sig) is not int:
        raise _fail(node, f"its signature is {node.sig!r}, not an interned id")
    stands_for = sig_of(node.sig)   # None: forgotten by the bounded table (ids are never reused)
    if stands_for is not None and type(stands_for) is not TracedKey and stands_for != made_of:
        raise _fail(node, f"its signature stands for {stands_for}, but the builder (ir/build.py `signature`) "
                          f"gives a node of its parts {made_of}: equal nodes would get different keys")
    known = _STRUCTURES.get(node.sig)
    if known is None:
        _STRUCTURES.put(node.sig, made_of)
    elif known != made_of:
        raise _fail(node, f"signature {node.sig} stood for {known} and now for {made_of}: two structures "
                          "under one signature would share compiled graphs")


def _leaf(node: Node) -> None:
    if node.inputs or node.args:
        raise _fail(node, "a leaf has no arguments and no operands")


def _data(node: Node) -> None:
    _leaf(node)
    data = node.data
    if data is None or getattr(data, "shape", None) != node.shape or getattr(data, "dtype", None) != node.dtype:
        raise _fail(node, f"a DATA node's buffer must have its shape and dtype; it holds {data!r}")


def _scalar(node: Node) -> None:
    _leaf(node)
    value, dtype = node.data, node.dtype
    if node.shape != () or type(value) not in _NUMBERS:
        raise _fail(node, f"a SCALAR node holds a Python number and has shape (); it holds {value!r}")
    if (type(value) is complex and not dtype.is_complex) or \
            (type(value) is float and not (dtype.is_floating_point or dtype.is_complex)):
        raise _fail(node, f"a {type(value).__name__} scalar cannot travel as {dtype}")


def _getitem(node: Node) -> None:
    source, index = node.args if len(node.args) == 2 else (None, None)
    if type(source) is not Node or not source.nout:
        raise _fail(node, "GETITEM reads (a node with several outputs, an index)")
    if type(index) is not int or not 0 <= index < source.nout or source.shape[index] is None:
        raise _fail(node, f"GETITEM index {index!r} names no computed output of {_describe(source)}")
    if (node.shape, node.dtype) != (source.shape[index], source.dtype[index]):
        raise _fail(node, f"GETITEM {index} must have the avals of output {index} of {_describe(source)}")


def _same_avals(node: Node, shapes: Any, dtypes: Any, what: str) -> None:
    if (node.shape, node.dtype) != (shapes, dtypes):
        raise _fail(node, f"its outputs must have the avals of {what}")


def _barrier(node: Node) -> None:
    if node.nout != len(node.inputs) or not node.inputs:
        raise _fail(node, "an optimization barrier has one output per operand")
    _same_avals(node, tuple(i.shape for i in node.inputs), tuple(i.dtype for i in node.inputs), "its operands")


def _sharding_constraint(node: Node) -> None:
    if len(node.inputs) != 1:
        raise _fail(node, "a sharding constraint has one operand")
    _same_avals(node, node.inputs[0].shape, node.inputs[0].dtype, "its operand")


def _view_scatter(node: Node) -> None:
    if len(node.inputs) != 2 or len(node.args) != 4 or not isinstance(node.args[2], torch._ops.OpOverload):
        raise _fail(node, "a view write reads (base, new view value, view op, view arguments)")
    _same_avals(node, node.inputs[0].shape, node.inputs[0].dtype, "its base")


def _call(node: Node) -> None:
    program = node.op
    if node.nout != len(program.out_avals):
        raise _fail(node, f"a CALL node has its program's {len(program.out_avals)} outputs")
    _same_avals(node, program.out_shapes, program.out_dtypes, "its program's outputs")


def _aten(node: Node) -> None:
    op = node.op
    if op not in _LOWERINGS:
        raise _fail(node, "the op has no lowering rule in its record (ir/ops.py)")
    schema = op._schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if len(node.args) > len(positional):
        raise _fail(node, f"{len(node.args)} positional arguments for a schema that takes {len(positional)}")
    names = {a.name for a in schema.arguments}
    if torch.Tag.nondeterministic_seeded in op.tags:
        names.add("seed")   # a random op's seed, a lifted scalar (frontend/handlers.py)
    unknown = set(node.kwargs or ()) - names
    if unknown:
        raise _fail(node, f"keyword arguments {sorted(unknown)} are not in the schema")
    for arg, value in zip(positional, node.args):
        if isinstance(arg.type, torch.TensorType) and type(value) is not Node:
            raise _fail(node, f"argument {arg.name!r} is a tensor in the schema, but holds {type(value).__name__}")
    returns = schema.returns
    if len(returns) == 1 and isinstance(returns[0].type, torch.TensorType) and node.nout:
        raise _fail(node, "the schema returns one tensor, the node has several outputs")
    if len(returns) > 1 and node.nout != len(returns):
        raise _fail(node, f"the schema returns {len(returns)} values, the node has {node.nout} outputs")


_RULES: dict[Any, Callable[[Node], None]] = {
    DATA: _data, SCALAR: _scalar, GETITEM: _getitem, OPT_BARRIER: _barrier,
    SHARDING_CONSTRAINT: _sharding_constraint, VIEW_SCATTER: _view_scatter}


def _op_rule(node: Node) -> Callable[[Node], None]:
    op = node.op
    if type(op) is Subprogram:
        return _call
    if isinstance(op, torch._ops.OpOverload):
        return _aten
    rule = _RULES.get(op) if isinstance(op, str) else None
    if rule is None:
        raise _fail(node, "its op is neither an ATen op, a program, nor an internal op of ir/node.py")
    return rule


def check_node(node: Node) -> None:
    """Every rule of one node (module docstring); its operands are checked on their own."""
    _check_avals(node)
    _op_rule(node)(node)
    _check_structure(node)


def check_roots(roots: Iterable[Node]) -> int:
    """Check the IR under `roots`, operands first; the number of nodes checked."""
    count = 0
    for node in post_order(roots):
        check_node(node)
        count += 1
    return count


def check_graph(graph: Graph) -> int:
    """Check a collected graph (ir/graph.py): each node, its order, its parameters, scalars
    and outputs; the number of nodes checked. Counted in `IRCheckedGraph`."""
    index = positions(graph)
    params = {id(d): i for i, d in enumerate(graph.params)}
    scalars = {id(s) for s in graph.scalars} | set(graph.merged_scalars or ())
    used: set = set()
    for position, node in enumerate(graph.order):
        check_node(node)
        for operand in node.inputs:
            at: Optional[int] = index.get(id(operand))
            if at is None or at >= position:
                raise _fail(node, f"operand {_describe(operand)} is "
                                  + ("not in the graph" if at is None else f"at position {at}, not before {position}"))
        if node.op is DATA:
            if id(node.data) not in params:
                raise _fail(node, "its buffer is not among the graph's parameters")
            used.add(id(node.data))
        elif node.op is SCALAR and id(node) not in scalars:
            raise _fail(node, "the scalar is not among the graph's scalar operands")
    if len(used) != len(params):
        raise MalformedIR(f"lazyxla: malformed graph: {len(params) - len(used)} of its {len(params)} parameters "
                          "are read by no node")
    bad = [p for p in graph.outputs if not 0 <= p < len(graph.order)]
    if bad or len(set(graph.outputs)) != len(graph.outputs):
        raise MalformedIR(f"lazyxla: malformed graph: outputs {graph.outputs} must be distinct positions "
                          f"of its {len(graph.order)} nodes")
    metrics.counter_add("IRCheckedGraph")
    return len(graph.order)
