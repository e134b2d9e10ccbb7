"""Sync entry points: step barriers (written and implied), partial syncs, eager ops,
graph inspection and hash; host reads are sync/host_read.py's.

Each entry point takes the runtime lock (sync/entry.py) and describes, per device, one
graph as a `Request` (sync/pipeline.py): its roots, its kind, and the donors that kind
allows (README.md, "What is supported"; docs/design.md, "alias/planner.py"):

| entry point                         | automatic donors | explicit donors        |
|-------------------------------------|------------------|------------------------|
| lx.sync() (step barrier)            | yes              | yes                    |
| implied barrier (optimizer.step())  | yes              | yes                    |
| graph size cut                      | yes              | no                     |
| lx.sync_tensors(donate_inplace=True)| yes (safe only)  | if explicit enabled    |
| lx.sync_tensors(donate_inplace=False)| no              | if explicit enabled    |
| host reads (.cpu(), .item(), print) | no               | if explicit enabled    |

Design: docs/design.md, "Donation planner" and "sync/pipeline.py, sync/api.py, sync/host_read.py".
"""
from __future__ import annotations

import functools
from typing import Optional

from .. import metrics
from .. import config
from ..alias import switches
from ..compile.cache import key_hex
from ..errors import FailedOpError
from ..frontend.grad_scaler import close_scaler_step, scaler_step_open
from ..frontend.storage import live_devices, live_storages
from ..frontend.optim import end_optimizer_step
from ..frontend import sync_hooks
from ..runtime import backend, collector
from ..runtime.execute import wait_all
from ..state import STATE
from . import barriers, entries, step_capture
from .entry import by_device, check_lazy, pending_items, runtime_lock, sync_begins, sync_ends
from .host_read import host_values
from .pipeline import Request, collect_roots, donor_plan, run_graph
from .placeholders import capturing

# the kinds of sync these entry points run (an implied barrier's names its reason)
STEP_BARRIER, IMPLIED_BARRIER, SIZE_CUT, PARTIAL, EAGER_OP, INSPECTION = (
    "step barrier", "implied step barrier", "graph size cut", "partial sync", "eager op", "inspection")


def sync(wait: bool = False) -> None:
    """Step barrier: materialise every live pending tensor, one graph per device."""
    with runtime_lock():
        end_optimizer_step()   # a step that raised never ran the post hook
        close_scaler_step()    # nor one whose GradScaler.update never came
        STATE.deferred_barrier = False
        _barrier(STEP_BARRIER, explicit=True)
        metrics.counter_add("MarkStep")
    if wait:
        wait_device_ops()


def _barrier(kind: str, explicit: bool) -> int:
    """Run all pending work, one graph per device (lock held); the number of IR nodes run."""
    started = sync_begins()
    STATE.traced_since_sync = 0
    young = collector.young()
    if not STATE.pending_work:
        # No storage made or given a pending value since the last barrier's graphs ran (an
        # lx.sync() or mark_step() right after optimizer.step()'s implied barrier): nothing
        # to collect, so the live storages are not walked (docs/design.md, "An empty
        # barrier"); the collector still has its barrier
        metrics.counter_add("BarrierNothingPending")
        backend.current().after_barrier(young)
        sync_ends(kind, started, nodes=0)
        return 0
    # cleared before the graphs run: anything a failure leaves pending sets it again below
    STATE.pending_work = False
    nodes = 0
    failed: Optional[FailedOpError] = None
    try:
        for device in live_devices():
            try:
                nodes += _device_graph(device, kind, explicit)
            except FailedOpError as e:   # contained (sync/failures.py): the other devices still run
                failed = failed or e
    except BaseException:   # a graph that raised left its roots pending
        STATE.pending_work = True
        raise
    finally:
        # after the graphs ran, when the step's pending IR is gone: the collector's young
        # generation then holds only what the step keeps (docs/design.md, issue 50)
        backend.current().after_barrier(young)
    sync_ends(kind, started, nodes=nodes)
    if failed is not None:
        STATE.pending_work = True
        try:
            raise failed
        finally:   # no cycle through this frame (sync/pipeline.py `run_graph` says why)
            del failed
    return nodes


def _device_graph(device: int, kind: str, explicit: bool) -> int:
    """The barrier's graph of `device`; the number of IR nodes it ran. Its pending values
    are held by this frame only, and freed when it returns."""
    live = live_storages(device)
    items = pending_items(live)
    leaves = entries.leaves(device, [st for _, st in items])
    # a step seen before runs as its recorded executable (sync/step_capture.py)
    step = step_capture.begin(device, live, items, leaves, kind)
    result = run_graph(Request(device, items, kind, automatic=True, explicit=explicit, skip_donated=True,
                               leaves=leaves, step=step, record=functools.partial(step_capture.record, step),
                               live=live))
    return 0 if result is None else result.nodes


def optimizer_stepped(optimizer) -> None:
    """`optimizer.step()` ended (frontend/optim.py's post hook): the implied step barrier
    of sync/barriers.py, with lx.sync()'s donation, unless switched off, inside a captured
    function, or for an optimizer of non-lazy parameters."""
    if not barriers.implied_barriers_enabled() or capturing() or not barriers.has_lazy_params(optimizer):
        return
    if scaler_step_open():   # inside GradScaler.step: the step ends at GradScaler.update
        STATE.deferred_barrier = True
        return
    _implied_barrier("optimizer.step")


def compiled_update_done() -> None:
    """A compiled graph updated trainable parameters in place (dynamo/replay.py): the end of
    a compiled optimizer step, whose post hook dynamo traced as a no-op. The same implied
    step barrier as `optimizer_stepped`'s, so a compiled training loop without lx.sync()
    runs one step graph a step instead of growing one pending graph."""
    if not barriers.implied_barriers_enabled() or capturing():
        return
    if scaler_step_open():
        STATE.deferred_barrier = True
        return
    _implied_barrier("compiled optimizer step")


def scaler_updated() -> None:
    """GradScaler.update traced its scale update: run the barrier its step deferred."""
    if STATE.deferred_barrier:
        STATE.deferred_barrier = False
        _implied_barrier("optimizer.step, after GradScaler.update")


def _implied_barrier(reason: str) -> None:
    """A step barrier lazyxla placed, its kind naming `reason` (what ended the step)."""
    close_scaler_step()
    with runtime_lock():
        nodes = _barrier(f"{IMPLIED_BARRIER} ({reason})", explicit=True)
    barriers.record(reason, nodes)


def cut_graphs() -> None:
    """Graph size cap reached: warn (once), then materialise all pending work (automatic
    aliasing stays safe via the planner). Never explicit donors, even with explicit
    donation enabled: the cut happens at an op the user did not choose, often one that
    reads the marked tensor, which then raised DonatedBufferError at a random op
    (differential tester)."""
    barriers.warn_graph_size(config.SETTINGS.graph_op_limit)
    with runtime_lock():
        metrics.counter_add("GraphSizeCut")
        nodes = _barrier(SIZE_CUT, explicit=False)
    barriers.record("graph size cap (LAZYXLA_GRAPH_OP_LIMIT)", nodes)


def eager_run(storages: list) -> None:
    """Eager mode (experimental/eager.py): run the pending work of `storages`, the ones
    an op just wrote, now, as one graph per device; donors as a partial sync's. Called
    from the op's dispatch, which holds the runtime lock."""
    STATE.traced_since_sync = 0
    groups: dict = {}
    for st in storages:
        groups.setdefault(st.device, []).append(st)
    for device, group in groups.items():
        run_graph(Request(device, pending_items(group), EAGER_OP, automatic=True,
                          explicit=switches.explicit_donation_enabled(device), eager=True))


def sync_tensors(tensors, *, wait: bool = True, donate_inplace: bool = True) -> None:
    """Partial sync of just `tensors`; never donates a buffer another live tensor needs."""
    tensors = check_lazy(tensors, "sync_tensors")
    with runtime_lock():
        started = sync_begins()
        for device, storages in by_device(tensors).items():
            run_graph(Request(device, pending_items(storages), PARTIAL, automatic=donate_inplace,
                              explicit=switches.explicit_donation_enabled(device)))
        sync_ends(PARTIAL, started)
    if wait:
        wait_device_ops()


def wait_device_ops() -> None:
    wait_all()


def pending_graphs(tensors=None, *, automatic: bool = True, explicit: Optional[bool] = None) -> list:
    """(graph, donors) per device that a sync would run, without compiling or running it:
    a step barrier's when `tensors` is None, else a partial sync of `tensors`.
    `explicit=None` means "as that sync would": always at a barrier, else if enabled."""
    with runtime_lock():
        if tensors is None:
            groups = {d: live_storages(d) for d in live_devices()}
        else:
            groups = by_device(check_lazy(tensors, "graph inspection"))
        result = []
        for device, storages in groups.items():
            use_explicit = explicit if explicit is not None else (
                tensors is None or switches.explicit_donation_enabled(device))
            # a step barrier's graph leaves out what reads a donated buffer, as the barrier does
            items = pending_items(storages)
            # and reads the entry values as the barrier does (sync/entries.py)
            leaves = entries.leaves(device, [st for _, st in items]) if tensors is None else None
            request = Request(device, items, INSPECTION, automatic=automatic,
                              explicit=use_explicit, skip_donated=tensors is None, leaves=leaves)
            collected = collect_roots(request) if request.items else None
            if collected is None:
                continue
            donors, _ = donor_plan(request, collected.graph, collected.targets)
            result.append((collected.graph, donors))
        return result


def graph_hash(tensors) -> str:
    """Key of the graph a sync of `tensors` would compile, with its donors (explicit
    donors only when explicit donation is enabled, as upstream `_get_graph_hash`)."""
    tensors = check_lazy(tensors, "graph_hash")
    graphs = pending_graphs(tensors, automatic=False)
    return key_hex(tuple(graph.key + (donors,) for graph, donors in graphs))


# import-time seam: the frontend, a layer below, reaches sync through these (frontend/sync_hooks.py)
sync_hooks.install(host_values, cut_graphs, eager_run, optimizer_stepped, scaler_updated)
