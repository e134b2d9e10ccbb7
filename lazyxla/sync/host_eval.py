"""Small host reads computed on the host: no device graph for a check on a scalar.

Where a read's whole pending graph is small, every value in it has at most
`host_read_max_elements` elements (the backend's, or LAZYXLA_HOST_READ_MAX_ELEMENTS),
every op is a deterministic ATen or prims op, and every device input is a scalar (one element), the IR is replayed with eager
PyTorch on CPU tensors: the scalars are downloaded once and kept on their `DeviceData`
(`host_copy`; device buffers are immutable), and the storages read stay pending for the
device. A read that shares pending work with other live tensors replays only when that
work is trivial; otherwise the wide read (sync/barriers.py) computes it on the device.
Each replayed value is checked against the IR's shape and dtype; any difference, or any op
that fails on CPU, sends the read to the device. Random ops never replay (their device
streams differ from PyTorch's).

Design: docs/design.md, "Small reads on the host".
"""
from __future__ import annotations

import math
from typing import Any, Collection, Optional

import torch

from .. import metrics
from ..ir.node import DATA, GETITEM, SCALAR, VIEW_SCATTER, Node
from ..ir.walk import post_order
from ..runtime import backend
from ..runtime.transfer import download

MAX_NODES = 256
_NAMESPACES = ("aten", "prims")
_CPU = torch.device("cpu")


def numel(node: Node) -> int:
    """Elements of all of `node`'s outputs (an output a backward op was asked not to
    compute, its output_mask False, has no shape and counts none)."""
    shapes = node.shape if node.nout else (node.shape,)
    return sum(math.prod(s) for s in shapes if s is not None)


# Ops whose values are unspecified: eager's garbage and the device's zeros both honour
# them, but a replay must not turn one into the other.
_UNSPECIFIED = frozenset(("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"))


def replayable_op(node: Node) -> bool:
    """Whether eager PyTorch computes `node` (not a leaf, not GETITEM) exactly as its IR
    says: a deterministic ATen or prims op that writes no operand, or a write through a
    view (VIEW_SCATTER: a copy of the base with the view's elements replaced)."""
    op = node.op
    if op is VIEW_SCATTER:
        op = node.args[2]
    if not isinstance(op, torch._ops.OpOverload) or op.namespace not in _NAMESPACES:
        return False
    if torch.Tag.nondeterministic_seeded in op.tags or op._schema.is_mutable:
        return False   # random, or writes an operand in place (a cached host copy among them)
    if op._opname in _UNSPECIFIED:
        return False
    return not (node.kwargs and "seed" in node.kwargs)


def _replayable(node: Node, limit: int) -> bool:
    if numel(node) > limit:
        return False
    op = node.op
    if op is DATA:
        # Scalars only: a replay of a computation on tensors would stand in for the XLA
        # lowering of ordinary model code, and its floating-point results could differ
        # in the last bits from what the device computes for the same pending tensor.
        return numel(node) <= 1
    if op is SCALAR or op is GETITEM:
        return True
    return replayable_op(node)


def replay_order(roots: list[Node], given: Collection[int] = ()) -> Optional[list[Node]]:
    """The nodes of `roots`' graph, operands first, when the whole graph can be replayed
    on the host (module docstring); None otherwise. `given`: ids of nodes whose values the
    caller supplies to `replay`, left out with what only they reach."""
    limit = backend.setting("host_read_max_elements")
    if limit <= 0:
        return None
    reached = 0
    refused = False

    def cannot_replay(node: Node) -> bool:
        # asked as each node is first reached, so a large graph is refused at its first
        # node the replay cannot take (or past MAX_NODES), before the walk descends into it
        nonlocal reached, refused
        if id(node) in given:
            return True
        reached += 1
        refused = refused or reached > MAX_NODES or not _replayable(node, limit)
        return refused

    order: list[Node] = []
    for node in post_order(roots, stop=cannot_replay):
        if refused:
            return None
        order.append(node)
    return None if refused else order


def host_copy(node: Node) -> torch.Tensor:
    """The value of DATA leaf `node` on the host, downloaded once per buffer."""
    data = node.data
    if data.host_copy is None:
        data.host_copy = download(data.live_array(), node.dtype)
    return data.host_copy


def _value(node: Node, values: dict) -> Any:
    if node.op is DATA:
        return host_copy(node)
    if node.op is SCALAR:
        return node.data
    if node.op is GETITEM:
        source, index = node.args
        return values[id(source)][index]
    if node.op is VIEW_SCATTER:
        base, new, view_op, view_args = node.args
        out = values[id(base)].clone()
        view_op(out, *view_args).copy_(values[id(new)])
        return out

    def operand(a: Any) -> Any:
        if isinstance(a, Node):
            return values[id(a)]
        if isinstance(a, (list, tuple)):
            return type(a)(operand(x) for x in a)
        if isinstance(a, torch.device):
            return _CPU
        return a
    kwargs = {k: operand(v) for k, v in node.kwargs.items()} if node.kwargs else {}
    return node.op(*operand(node.args), **kwargs)


def _matches(node: Node, value: Any) -> bool:
    if node.op is SCALAR:
        return True
    if node.nout:
        return (isinstance(value, (tuple, list)) and len(value) == node.nout
                and all(v is None if s is None else
                        (isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(s) and v.dtype == d)
                        for v, s, d in zip(value, node.shape, node.dtype)))
    return (isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(node.shape)
            and value.dtype == node.dtype)


def replay(order: list[Node], values: dict) -> bool:
    """Compute `order` (operands first) with eager PyTorch on CPU into `values` (id(node)
    -> value; values already there are inputs). False if an op fails on CPU, or its value
    does not have the IR's shape and dtype: the device must compute it."""
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            for node in order:
                value = _value(node, values)
                if not _matches(node, value):
                    return False
                values[id(node)] = value
    except Exception:   # an op CPU eager refuses, or refuses these operands
        return False
    return True


def evaluate(roots: list[Node], shared: list[Node] = ()) -> Optional[list[torch.Tensor]]:
    """CPU values of `roots`, replayed on the host; None where the graph does not qualify
    or the replay does not reproduce the IR's shapes and dtypes. `shared`: the pending
    values of live tensors that share work with the read; the replay then also needs the
    read to be made of constants, or those values to be small enough to replay (the work
    computed twice, here and later on the device, is then trivial)."""
    order = replay_order(roots)
    if order is None:
        return None
    if shared and any(n.op is DATA for n in order) and replay_order(list(shared)) is None:
        return None
    values: dict[int, Any] = {}
    if not replay(order, values):
        return None
    metrics.counter_add("HostEvaluatedRead")
    # Fresh tensors: a view op replays as a view, maybe of a cached host copy.
    return [torch.tensor(values[id(r)], dtype=r.dtype) if r.op is SCALAR else values[id(r)].clone()
            for r in roots]
