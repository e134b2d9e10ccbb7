"""Host reads (`.cpu()`, `.item()`, `print`): CPU copies of lazy tensors, views included.

A read takes what it can without a graph first: device data is downloaded, a view of
device data sliced on the device (sync/view_read.py). For the rest, per device, one
graph computes the read's pending storages and views; where that graph runs is decided in
`_compute_read`: replayed on the host when small (sync/host_eval.py; its storages then
stay pending), else on the device with its integer bookkeeping on the host
(sync/host_split.py), through the sync's stages (sync/pipeline.py) as a "host read".
That graph also computes the live pending tensors that share work with the read
(sync/barriers.py), or all of the device's for a wide read; with LAZYXLA_CROSSING_READS=1,
of those whose values it does not compute itself (the gradients of a loss read), only what
they need from it, leaving them pending (sync/crossing.py). Donors: none for what the
read reads; the materialized extras' in-place updates as a partial sync's; explicit
donors if enabled.

Design: docs/design.md, "sync/pipeline.py, sync/api.py, sync/host_read.py".
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import config, metrics
from ..alias import switches
from ..errors import DonatedBufferError
from ..frontend.storage import is_wide_read, live_devices, live_storages
from ..ir.node import DATA
from ..runtime.transfer import download
from ..state import STATE
from . import barriers, crossing, host_eval, host_split, read_capture
from .entry import by_device, check_lazy, pending_items, runtime_lock, sync_begins, sync_ends
from .pipeline import Request, run_graph
from .view_read import read_view

KIND = "host read"


def host_values(tensors: list, allow_explicit: bool = True) -> list:
    """CPU copies of `tensors` (views included); materialises their bases, donates nothing
    unless explicit donation is enabled (and `allow_explicit`)."""
    tensors = check_lazy(tensors, KIND)
    with runtime_lock():
        started = sync_begins()
        # Tensors that already hold device data are read before any graph runs: with
        # explicit donation enabled, the graph of this same read (e.g. for a view in
        # `[a, a[0]]`) may donate a marked buffer that was asked for.
        # Views of device data are read the same way, sliced on the device outside any
        # step graph: no graph to compile for a transposed `.grad`, nothing donated.
        values = _read_device_data(tensors)
        for device, storages in by_device(tensors).items():
            items = pending_items(storages)
            position = {id(st): i for i, (_, st) in enumerate(items)}
            slots = {}   # id(tensor) -> its item's index
            for t in tensors:
                if t._st.device != device or id(t) in values:
                    continue
                if t._view is None:
                    slots[id(t)] = position[id(t._st)]
                    continue
                slots[id(t)] = len(items)
                items.append((t.checked_value(), None))
            if not items:      # all device data, read above
                continue
            outs = _compute_read(device, storages, items, allow_explicit)
            values.update((key, outs[i]) for key, i in slots.items())
        hosts = []
        for t in tensors:
            value = values[id(t)]
            # a value the host computed (sync/host_split.py) may be a handle's host copy
            hosts.append(value.clone() if isinstance(value, torch.Tensor) else download(value, t.dtype))
        _recount_pending_ops()
        sync_ends(KIND, started, tensors=len(tensors))
    return hosts


def _recount_pending_ops() -> None:
    """After a read, count toward the graph size cap only the ops still pending (lock held).

    The cap counts ops traced since the last barrier, and a loop of reads without barriers
    (generate()) would reach it although each read's graph left nearly nothing pending.
    Once the count passes half the cap, the pending IR is counted instead: one walk per
    LAZYXLA_GRAPH_OP_LIMIT / 2 ops, and a loop that really grows its pending work still meets the
    cap."""
    if STATE.traced_since_sync <= config.SETTINGS.graph_op_limit // 2:
        return
    pending = [st.value for device in live_devices() for st in live_storages(device) if st.value.op is not DATA]
    STATE.traced_since_sync = barriers.pending_nodes(pending)


def _read_device_data(tensors: list) -> dict:
    """{id(t): CPU copy} for the tensors whose base holds device data: a base is
    downloaded whole, a view is sliced on the device and only its elements move
    (sync/view_read.py); the rest need a graph. A one-element buffer's copy stays on its
    handle, as a host replay's would (sync/entries.py computes from it)."""
    hosts: dict = {}
    for t in tensors:
        st = t._st
        if st.value.op is not DATA:
            continue
        data = st.value.data
        if t._view is None and host_eval.numel(st.value) <= 1:
            hosts[id(t)] = host_eval.host_copy(st.value).clone()   # raises for a donated buffer
        elif t._view is None:
            hosts[id(t)] = (data.host_copy.clone() if data.host_copy is not None
                            else download(data.live_array(), t.dtype))
        else:
            hosts[id(t)] = read_view(data, st.value, t._view)
    return hosts


def _read_extra(device: int, storages: list, items: list) -> tuple[list, Optional[crossing.Split]]:
    """Other live pending storages a host read of `storages` materializes in its graph:
    all of the device's pending work for a wide read (frontend/storage.py
    `mark_wide_read`, GradScaler's found_inf), else those sharing pending work with the
    read (sync/barriers.py), so no later sync computes that work again; and, where the
    sharing work stays pending, what the read computes for it (sync/crossing.py)."""
    own = set(map(id, storages))
    if any(is_wide_read(st) for st in storages):
        return [item for item in pending_items(live_storages(device)) if id(item[1]) not in own], None
    if not barriers.implied_barriers_enabled():
        return [], None
    read, sharing = barriers.sharing_items(device, [node for node, _ in items], own)
    plan = crossing.split(read, sharing) if sharing else None
    return (sharing, None) if plan is None else (plan.materialize, plan)


def _compute_read(device: int, storages: list, items: list, allow_explicit: bool) -> list:
    """One value per item of `items` (a CPU tensor or a device array), decided in one
    place: replayed on the host (sync/host_eval.py: small, and what it shares with live
    tensors is trivial to compute again; its storages stay pending), else the device
    graph's outputs, with its integer bookkeeping on the host beside it (`_run_read`)."""
    extra, plan = _read_extra(device, storages, items)
    if not any(is_wide_read(st) for st in storages):
        shared = [node for node, _ in extra] + ([node for node, _ in plan.pending] if plan else [])
        values = host_eval.evaluate([node for node, _ in items], shared)
        if values is not None:
            return values
    if extra or plan:
        metrics.counter_add("WideRead")
    explicit = allow_explicit and switches.explicit_donation_enabled(device)
    kept = [(node, None) for node in plan.crossing] if plan else []
    # what the read installs, by the value it computes: a crossing value held by one of
    # them is read from its storage (sync/crossing.py)
    installed = {node: st for node, st in items + extra if st is not None}
    outs = _run_read(device, items, extra + kept, explicit)
    distinct: dict = {}   # collect() dedupes equal roots: one output per distinct root
    slots = [distinct.setdefault(id(node), len(distinct)) for node, _ in items + extra + kept]
    if kept and len(outs) == len(distinct):   # not the fallback to the read's own roots
        crossing.keep(plan, [outs[i] for i in slots[len(slots) - len(kept):]], device, installed)
    return [outs[i] for i in slots[:len(items)]]


def _run_read(device: int, items: list, extra: list, explicit: bool) -> tuple:
    """Run a host read's graph, its integer bookkeeping on the host (sync/host_split.py),
    as the executable recorded for an earlier read of the same fingerprint where there is
    one (sync/read_capture.py); `extra` roots come after `items`, so slots stay put. The
    extra storages are synced as a partial sync would: their in-place updated buffers are
    donated when nothing else needs them; what the read reads never is. If some extra root
    needs a donated buffer, the read falls back to its own roots."""
    def on_device(owners: set):
        def run(device_items: list, written: frozenset = frozenset(), leaves=None, record=None) -> tuple:
            result = run_graph(Request(device, device_items, KIND, automatic=bool(owners), explicit=explicit,
                                       auto_owners=owners, written=written, leaves=leaves, record=record))
            return () if result is None else result.outputs
        return run
    try:
        attempt = read_capture.begin(device, items + extra, len(items), explicit)
        return read_capture.run(attempt, on_device({id(st) for _, st in extra}))
    except DonatedBufferError:
        if not extra:
            raise
        return host_split.run(device, items, on_device(set()), host_split.split_read([node for node, _ in items]))
