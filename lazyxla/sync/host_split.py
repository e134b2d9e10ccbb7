"""A host read's integer bookkeeping, computed on the host so the device graph keeps its shapes.

Decoding loops (`generate()`) grow small integer tensors every token, which would give
each token's host-read graph a new shape. This module splits a host read's graph in
three: `before`, bookkeeping computed from host-known values only (small integer device
data, downloaded once per buffer, and scalars; what the device needs is uploaded as
parameters); the device graph, everything else; and `after`, bookkeeping that needs device
results and that no device node reads (its results stay on the host as staged device
data). Bookkeeping is a node with integer or boolean outputs of at most
`host_bookkeeping_max_elements` elements (the backend's, or
LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS), computed by a deterministic ATen op
(sync/host_eval.py `replayable_op`) from integer or boolean operands and scalars;
floating-point values always stay on the device. A read that ends a decode token records its
split and replays it onto the next token's nodes (sync/read_capture.py, keyed by `SplitKeys`).

Design: docs/design.md, "Bookkeeping on the host (generate())".
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .. import metrics
from ..ir.bounded import BoundedTable
from ..ir.build import data_node
from ..ir.node import DATA, GETITEM, SCALAR, SIG_TABLE_CAP, VIEW_SCATTER, Node
from ..ir.walk import post_order
from ..runtime import backend, placement
from ..runtime.transfer import download, staged
from . import host_eval

_INTEGRAL = frozenset((torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64))
# Run the device graph of some (root, storage) items, given the ids of the storages the
# host writes in the same read and, optionally, nodes to read as given device data
# ({id(node): DATA node}) and what to call with the graph it ran (sync/pipeline.py
# `Request.record`); one output per distinct root, in the order they first appear
# (sync/pipeline.py `run_graph`).
RunDevice = Callable[..., tuple]
# A constant (made from scalars alone) larger than this stays on the device: there it fuses
# into the graph at no cost and keeps its shape, while the host would compute and upload it
# on every read (generate()'s `min_new_tokens` masks `arange(vocab_size)` every token).
_DEVICE_CONSTANT_ELEMENTS = 4096


class Split:
    """Where each node of a read's graph is computed (module docstring)."""
    __slots__ = ("before", "after", "uploads", "for_host", "on_device")

    def __init__(self, before: list, after: list, uploads: list, for_host: list, on_device: set) -> None:
        self.before = before          # host-known leaves and bookkeeping of them, operands first
        self.after = after            # bookkeeping of device results, operands first
        self.uploads = uploads        # `before` nodes the device graph reads
        self.for_host = for_host      # device nodes whose values `after` reads
        self.on_device = on_device    # ids of the device graph's computed nodes


def _integral(node: Node) -> bool:
    if not node.nout:
        return node.dtype in _INTEGRAL
    return all(d in _INTEGRAL for d in node.dtype)


# signature id -> (integral outputs, elements, a GETITEM or an op the host replays): what
# `_bookkeeping` asks of a node alone depends only on its signature (op, static arguments,
# operand and output avals), so a decode loop classifies each signature once instead of
# every node of every token (ids are never reused: a forgotten one is asked again).
_SIG_CLASS = BoundedTable(SIG_TABLE_CAP // 4)


def _sig_class(node: Node) -> tuple:
    known = _SIG_CLASS.get(node.sig)
    if known is None:
        known = _SIG_CLASS.put(node.sig, (_integral(node), host_eval.numel(node),
                                          node.op is GETITEM or host_eval.replayable_op(node)))
    return known


class SplitKeys(dict):
    """Signature id -> what `split_read` decides a node of that signature by, under one
    bookkeeping limit, for a host read's capture (sync/read_capture.py): a node that may be
    bookkeeping (integral, at most `limit` elements, not a scalar) by its op, its dtypes and
    its class, not its shape or static arguments, which change every token for generate()'s
    growing ids and stay on the host; any other node by its signature."""
    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def fill(self, node: Node):
        integral, elements, replayable = _sig_class(node)
        op = node.op
        if op is SCALAR or not integral or elements > self.limit:
            key = node.sig
        else:
            key = (op if op is not VIEW_SCATTER else node.args[2], op is VIEW_SCATTER, node.nout, node.dtype,
                   elements > _DEVICE_CONSTANT_ELEMENTS, replayable)
        if len(self) >= SIG_TABLE_CAP // 4:   # bounded as the signature tables (ir/bounded.py)
            self.clear()
        self[node.sig] = key
        return key


_SPLIT_KEYS: dict = {}   # limit -> its SplitKeys (one limit in a process, as a rule)


def split_keys(limit: int) -> SplitKeys:
    keys = _SPLIT_KEYS.get(limit)
    if keys is None:
        keys = _SPLIT_KEYS[limit] = SplitKeys(limit)
    return keys


def _bookkeeping(node: Node, limit: int) -> bool:
    """Whether the host may compute `node` (module docstring); leaves excluded."""
    integral, elements, replayable = _sig_class(node)
    if not integral or elements > limit or not replayable:
        return False
    return all(i.op is SCALAR or _integral(i) for i in node.inputs)


def split_read(roots: list) -> Optional[Split]:
    """The split of `roots`' graph; None where there is no bookkeeping to move, or the
    split is off (setting 0, SPMD). Under a storage dtype policy (the TPU's default holds
    int64 in int32) the host computes in the logical dtypes, as a host replay does, and what
    it hands the device is staged as an upload is, narrowed (runtime/transfer.py `staged`,
    which refuses a value the narrower type cannot hold)."""
    limit = backend.setting("host_bookkeeping_max_elements")
    if limit <= 0 or placement.spmd_enabled():
        return None
    order = list(post_order(roots))
    host_known: set = set()     # ids of `before` nodes
    movable: set = set()        # ids of bookkeeping nodes
    constant: set = set()       # ids of nodes made from scalars alone
    for node in order:
        op = node.op
        if op is SCALAR:
            host_known.add(id(node))
        elif not _integral(node):   # floats (most of a model's nodes) stay on the device
            continue
        elif op is DATA:
            if host_eval.numel(node) <= limit:
                host_known.add(id(node))
        elif _bookkeeping(node, limit):
            if all(i.op is SCALAR or id(i) in constant for i in node.inputs):
                constant.add(id(node))
                if host_eval.numel(node) > _DEVICE_CONSTANT_ELEMENTS:
                    continue
            from_host = all(id(i) in host_known for i in node.inputs)
            if from_host:
                host_known.add(id(node))
            # a multi-output op and its elements move only together, from host values:
            # the device graph returns single values, never a tuple to split on the host
            if from_host or not (node.nout or op is GETITEM):
                movable.add(id(node))
    if not movable:
        return None
    needed: set = set()         # ids the device graph reads
    on_device: set = set()
    after_ids: set = set()
    for node in reversed(order):   # consumers before operands
        nid = id(node)
        op = node.op
        if op is DATA or op is SCALAR or nid in host_known:
            continue
        if nid in movable and nid not in needed:
            after_ids.add(nid)
            continue
        on_device.add(nid)
        for i in node.inputs:
            needed.add(id(i))
    after = [n for n in order if id(n) in after_ids]
    uploads = [n for n in order if id(n) in host_known and id(n) in needed and n.op is not DATA
               and n.op is not SCALAR]
    if not after and not uploads and not any(id(r) in host_known for r in roots):
        return None
    computed_first = [n for n in order if id(n) in host_known and n.op is not DATA and n.op is not SCALAR]
    read_by_host = {id(i) for n in computed_first + after for i in n.inputs}
    # leaves enter only where the host reads them: a device buffer is downloaded once
    before = [n for n in order if id(n) in host_known
              and ((n.op is not DATA and n.op is not SCALAR) or id(n) in read_by_host)]
    for_host = [n for n in order if id(n) in on_device and id(n) in read_by_host]
    return Split(before, after, uploads, for_host, on_device)


def _distinct(items: list) -> dict:
    slots: dict = {}
    for node, _ in items:
        slots.setdefault(id(node), len(slots))
    return slots


def run(device: int, items: list, run_device: RunDevice, split: Optional[Split]) -> tuple:
    """Compute `items` (`(root, storage or None)`) as `split` (`split_read` of their roots;
    a host read's capture maps a recorded one onto this read's nodes, sync/read_capture.py):
    the bookkeeping on the host, the rest with `run_device`; one result per distinct root,
    in the order they first appear, a device array or (computed on the host) a CPU tensor.
    Storages of host-computed roots receive staged device data holding the value."""
    if split is None:
        return run_device(items, frozenset())
    values: dict = {}
    if not host_eval.replay(split.before, values):
        return run_device(items, frozenset())    # nothing was computed or installed yet
    metrics.counter_add("HostBookkeepingRead")
    metrics.counter_add("HostBookkeepingOps", len(split.after) + sum(n.op is not DATA and n.op is not SCALAR
                                                                     for n in split.before))
    # the device graph reads the uploaded values as device data in place of their nodes
    leaves = {id(n): data_node(staged(owned_value(values[id(n)]), device)) for n in split.uploads}
    device_items = [(node, st) for node, st in items if id(node) in split.on_device]
    device_items += [(n, None) for n in split.for_host]
    written = frozenset(id(st) for node, st in items if st is not None and id(node) not in split.on_device)
    outs = run_device(device_items, written, leaves) if device_items else ()
    device_slot = _distinct(device_items)
    for n in split.for_host:
        values[id(n)] = download(outs[device_slot[id(n)]], n.dtype)
    if not host_eval.replay(split.after, values):
        _after_on_device(device, split, items, values, run_device)
    results = [outs[device_slot[id(node)]] if id(node) in split.on_device else values[id(node)]
               for node, st in _unique(items)]
    for node, st in items:
        if st is not None and id(node) not in split.on_device:
            value = owned_value(values[id(node)])
            values[id(node)] = value
            st.write(data_node(staged(value, device, owner=st)))
    return tuple(results)


def _after_on_device(device: int, split: Split, items: list, values: dict, run_device: RunDevice) -> None:
    """`after` failed on the host (an op CPU eager refuses): compute the roots among it on
    the device, from the values the host and the device graph already have, into `values`."""
    leaves = {id(n): data_node(staged(values[id(n)], device)) for n in split.for_host}
    leaves.update({id(n): data_node(staged(owned_value(values[id(n)]), device))
                   for n in split.before if n.op is not DATA and n.op is not SCALAR})
    after = {id(n) for n in split.after}
    roots = [node for node, _ in _unique(items) if id(node) in after]
    for n, out in zip(roots, run_device([(n, None) for n in roots], frozenset(), leaves)):
        values[id(n)] = download(out, n.dtype)


def _unique(items: list) -> list:
    seen: set = set()
    out = []
    for node, st in items:
        if id(node) not in seen:
            seen.add(id(node))
            out.append((node, st))
    return out


def owned_value(value: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor of its own: a replayed view may share a cached host copy."""
    return value.clone(memory_format=torch.contiguous_format)
