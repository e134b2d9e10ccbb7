"""Crossing values: a host read computes what pending work outside it needs, not that work
(with LAZYXLA_CROSSING_READS=1; off by default: the split step is slower on CPU and TPU).

A read of the loss after `backward()` shares the forward with the pending gradients. The
read's graph computes its own roots plus the crossing nodes, the nodes of its graph that
the gradients' pending IR uses (a multi-output op's other output where that IR reads it),
as temporary outputs. The gradients stay pending, their IR rebuilt to read those outputs as
device data, so the host waits for the forward only and the backward joins the next
barrier's graph. Live tensors whose value the read's graph computes anyway (a K/V cache
written before the logits read it, the detached loss) are materialized as before.

Falls back to materializing the sharing work (sync/barriers.py) where the rule cannot
hold, would hold too much or would not pay: SPMD (device data made here carries no
sharding), pending work that already reads an earlier read's crossing values (gradient
accumulation's next micro-batch: one micro-batch's activations are held at a time), and
pending work much smaller than the read's graph (`SMALL_REMAINDER`).
Counter `CrossingValue`: buffers a read kept for pending work (a crossing value a live
tensor of the read holds, the loss itself, is read from that tensor).

Design: docs/design.md, "A read that waits for the forward only".
"""
from __future__ import annotations

import weakref
from typing import NamedTuple, Optional

import torch

from .. import config, metrics
from ..ir.build import data_node, with_operands
from ..ir.node import DATA, GETITEM, Node
from ..ir.walk import is_leaf, post_order
from ..runtime import placement, storage_dtypes
from ..runtime.device_data import DeviceData
from ..runtime.transfer import staged

_made: "weakref.WeakSet[DeviceData]" = weakref.WeakSet()   # crossing values still held
# Pending work outside the read smaller than 1/SMALL_REMAINDER of the read's graph is
# computed with it: left pending it would cost a graph of its own for little device time (an
# evaluation's logits concatenated after its loss read: 3 nodes beside 336)
SMALL_REMAINDER = 4


class Split(NamedTuple):
    """A read's sharing work divided: `materialize`, the `(value, storage)` items computed
    into their storages as before; `crossing`, the nodes output for `pending`, the
    storages left pending."""
    materialize: list
    crossing: list
    pending: list


def split(read: dict, sharing: list) -> Optional[Split]:
    """How a read whose graph computes the nodes of `read` (node -> position) treats the
    live pending `sharing` items (sync/barriers.py `sharing_items`); None: materialize them
    all (module docstring says when)."""
    if not config.SETTINGS.crossing_reads or placement.spmd_enabled():
        return None
    materialize, pending = [], []
    for item in sharing:
        value = item[0]
        # the read computes this value itself (an output of one of its multi-output ops too)
        inside = value in read or (value.op is GETITEM and value.inputs[0] in read)
        (materialize if inside else pending).append(item)
    if not pending:
        return None
    crossing: dict = {}   # node -> None, in the order met
    cheap: dict = {}
    left = 0   # computed nodes of the pending work outside the read's graph
    for node in post_order(_roots(pending), stop=lambda n: is_leaf(n) or n in read):
        left += 1
        for operand in node.inputs:
            if operand.op is DATA and operand.data in _made:
                return None   # an earlier read's crossing values: not two micro-batches' held
            if operand not in read:
                continue
            if node.op is GETITEM:   # another output of the read's multi-output op
                crossing[node] = None
            elif not _cheap(operand, cheap):
                crossing[operand] = None
    if left * SMALL_REMAINDER < len(read):
        return None
    return Split(materialize, list(crossing), pending)


def _roots(pending: list) -> list:
    """The pending values and entry values (frontend/storage.py) of `pending`'s storages."""
    roots = [value for value, _ in pending]
    roots += [st.entry for _, st in pending if st.entry is not None]
    return roots


def _cheap(node: Node, memo: dict) -> bool:
    """Whether `node` is a view or fill over leaves: computed again by the next graph rather
    than held (a transposed weight held for the backward would copy the weight)."""
    known = memo.get(node)
    if known is None:
        op = node.op
        if is_leaf(node):
            known = True
        elif isinstance(op, torch._ops.OpOverload) and (op.is_view or not node.inputs):
            known = all(_cheap(i, memo) for i in node.inputs)
        else:
            known = False
        memo[node] = known
    return known


def keep(plan: Split, values: list, device: int, installed: dict) -> None:
    """After the read ran: each crossing node's value (`values`, in `plan.crossing`'s order:
    a device array, or a CPU tensor the host computed) as device data, and the pending
    storages' IR rebuilt to read it. `installed`: node -> the storage the read installed
    that node's value into (its device data is read, not copied)."""
    swap: dict = {}
    made = 0
    for node, value in zip(plan.crossing, values):
        st = installed.get(node)
        if st is not None and st.value.op is DATA:
            swap[node] = st.value
            continue
        if isinstance(value, torch.Tensor):
            data = staged(value, device)
        else:
            data = DeviceData(value, node.shape, node.dtype, device,
                              stored_dtype=storage_dtypes.storage_for(node.dtype))
        _made.add(data)
        made += 1
        swap[node] = data_node(data, None)
    metrics.counter_add("CrossingValue", made)
    for node in post_order(_roots(plan.pending), stop=lambda n: is_leaf(n) or n in swap):
        inputs = node.inputs
        if any(i in swap for i in inputs):
            swap[node] = with_operands(node, swap)
    for _, st in plan.pending:
        st.rebuild(swap.get(st.value, st.value), swap.get(st.entry, st.entry))
