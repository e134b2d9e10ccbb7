"""Sync entry points: step barrier, partial sync, host reads, graph hash.

Every entry point goes through `_run`: collect -> plan donation -> cache /
compile -> execute -> install. What differs is the set of roots and which
donors the kind of sync allows (README.md, "What is supported"; docs/design.md, "alias/planner.py"):

| entry point                         | automatic donors | explicit donors        |
|-------------------------------------|------------------|------------------------|
| lx.sync() (step barrier)            | yes              | yes                    |
| implied barrier (optimizer.step())  | yes              | yes                    |
| graph size cut                      | yes              | no                     |
| lx.sync_tensors(donate_inplace=True)| yes (safe only)  | if explicit enabled    |
| lx.sync_tensors(donate_inplace=False)| no              | if explicit enabled    |
| host reads (.cpu(), .item(), print) | no               | if explicit enabled    |

A host read's graph also computes the live pending tensors that share work with it.

Design: docs/design.md, "Donation planner" and "sync/api.py".
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterable, Iterator, Optional

import torch

from .. import metrics
from .. import config
from ..alias import switches
from ..alias.planner import plan_donors
from ..compile.cache import Executable, get_or_compile, key_hex
from ..errors import DonatedBufferError, FailedOpError
from ..frontend.grad_scaler import close_scaler_step, scaler_step_open
from ..frontend.storage import is_wide_read, live_devices, live_storages
from ..frontend.optim import end_optimizer_step
from ..frontend.tensor import LazyTensor
from ..frontend.tracing import forget_lifted_scalars
from ..frontend import sync_hooks
from ..ir.graph import reads_donated
from ..ir.node import DATA
from ..runtime import backend, memory, timeline
from ..runtime.execute import execute, wait_all
from ..runtime.transfer import download
from ..state import STATE
from . import barriers, failures, host_eval, host_split, step_capture
from .placeholders import Placeholder, capturing, placeholder_refusal
from .collect import collect
from .install import install
from .view_read import read_view

# One lock for the whole runtime, also held by every op trace (lazyxla/lock.py,
# docs/reliability.md): syncs never interleave with each other or with tracing.
from ..lock import LOCK  # noqa: E402


class LastGraph:
    """What the most recent execution did, for lx.debug.donation_report()."""
    executable: Optional[Executable] = None
    decisions: list = []
    kind: str = ""
    n_nodes: int = 0


@contextlib.contextmanager
def _runtime_lock() -> Iterator[None]:
    """The runtime lock; with lx.metrics' detailed records on (`set_op_records`) its wait
    is recorded as `DeviceLockWait` (upstream's name for a sync's wait for its device)."""
    if not STATE.op_records:
        with LOCK:
            yield
        return
    start = time.perf_counter_ns()
    with LOCK:
        metrics.metric_add("DeviceLockWait", time.perf_counter_ns() - start)
        yield


def _run(device: int, items: list, *, automatic: bool, explicit: bool, kind: str,
         skip_donated: bool = False, eager: bool = False,
         auto_owners: Optional[set] = None, written: frozenset = frozenset(),
         leaves: Optional[dict] = None, step: Optional[step_capture.Attempt] = None) -> Optional[tuple]:
    """Collect, plan, compile and run one graph; its outputs, one per distinct root of
    `items` in the order they first appear (see _slot_of). `eager`: the graph of one
    eager op (experimental/eager.py), timed under the eager metrics. `auto_owners`,
    `written`: for the donor plan (alias/planner.py). `leaves`: nodes read as given
    device data (collect()). `step`: a step barrier's capture attempt, recorded once run
    (sync/step_capture.py); any other sync breaks the step's capture."""
    forget_lifted_scalars()   # ops traced from here on start a new sharing pattern
    if step is None:
        step_capture.note_read(device)
    if not items:
        return None
    started = timeline.start()
    try:
        graph, targets = collect(device, items, merge_scalars=True, leaves=leaves)
    except DonatedBufferError:
        if not skip_donated:
            raise
        # A pending tensor computed from a donated buffer (e.g. `v + 1` for a view `v`
        # of a donated tensor) can never be evaluated. A step barrier leaves it
        # pending instead of failing, so a donated tensor that stays referenced never
        # disturbs the syncs of other tensors; using it still raises DonatedBufferError.
        items = [item for item in items if not reads_donated(item[0])]
        if not items:
            return None
        graph, targets = collect(device, items, merge_scalars=True, leaves=leaves)
    if any(type(d) is Placeholder for d in graph.params):
        raise placeholder_refusal()
    timeline.mark("collect", started, nodes=len(graph.order))
    started = timeline.start()
    aliasing = switches.aliasing_enabled(device)
    donors, decisions = plan_donors(graph, targets, live_storages(device), automatic=automatic, explicit=explicit,
                                    aliasing=aliasing, kind=kind, auto_owners=auto_owners, written=written)
    timeline.mark("plan", started, donors=len(donors))
    if STATE.op_records and not eager:   # detailed records (lx.metrics.set_op_records)
        metrics.metric_add("TensorsGraphSize", len(graph.order))
    try:
        started = timeline.start()
        exe = get_or_compile(graph, donors, eager)
        timeline.mark("key and cache", started)
        outs = execute(graph, exe, eager)
        started = timeline.start()
        install(graph, targets, outs)
        timeline.mark("install", started, outputs=len(outs))
    except Exception as e:
        contained = None if memory.is_out_of_memory(e) else failures.contain(graph, items, e)
        if contained is not None:
            # The tensors that needed the failed op now carry its error (sync/failures.py);
            # the rest of the sync runs as its own graph, and the error is raised once.
            try:
                _run(device, contained.rest, automatic=automatic, explicit=explicit, kind=kind,
                     skip_donated=skip_donated, eager=eager, auto_owners=auto_owners, written=written,
                     leaves=leaves)
            except Exception as later:  # noqa: BLE001 - reported with the first failure
                contained.error.add_note(f"lazyxla: the rest of the {kind} then failed too: "
                                         f"{type(later).__name__}: {later}")
            raise contained.error from e
        # Compile and execute change nothing before the executable has run (execute()
        # marks donors only after it returns, and install() follows), so the sync is
        # all or nothing: say so, keep the original error type.
        lost = getattr(e, "lazyxla_lost_buffers", 0)
        note = (f"lazyxla: the {kind} was not applied: "
                + (f"the backend consumed {lost} donated buffer(s) before failing (their tensors now "
                   "raise DonatedBufferError); all other" if lost else "nothing was donated and the")
                + " tensors keep their values or pending computation; the next sync retries.")
        if memory.is_out_of_memory(e) and not isinstance(e, torch.OutOfMemoryError):
            # the backend's own out-of-memory (XLA RESOURCE_EXHAUSTED): same type and
            # report as lazyxla's check before running (runtime/memory.py check_fits)
            oom = torch.OutOfMemoryError(f"lazyxla: out of memory on device {device} running the {kind}: "
                                         f"{type(e).__name__}: {e}\n{memory.report_text(device)}")
            oom.add_note(note)
            raise oom from e
        e.add_note(note)
        raise
    if step is not None:
        step_capture.record(step, graph, targets, exe, decisions)
    LastGraph.executable, LastGraph.decisions, LastGraph.kind = exe, decisions, kind
    LastGraph.n_nodes = len(graph.order)
    return tuple(outs[slot] for slot in graph.root_slots)


def _pending(storages) -> list:
    return [(st.value, st) for st in storages if st.value.op is not DATA]


def sync(wait: bool = False) -> None:
    """Step barrier: materialise every live pending tensor, one graph per device."""
    with _runtime_lock():
        end_optimizer_step()   # a step that raised never ran the post hook
        close_scaler_step()    # nor one whose GradScaler.update never came
        STATE.deferred_barrier = False
        _barrier("step barrier", explicit=True)
        metrics.counter_add("MarkStep")
    if wait:
        wait_device_ops()


def _barrier(kind: str, explicit: bool) -> int:
    """Run all pending work, one graph per device (lock held); the number of IR nodes run."""
    started = _sync_begins()
    STATE.traced_since_sync = 0
    backend.current().after_barrier()
    nodes = 0
    failed: Optional[FailedOpError] = None
    for device in live_devices():
        try:
            step = step_capture.begin(device, live_storages(device), kind)
            captured = step_capture.replay(step)
            if captured is not None:   # the step ran as its recorded executable
                LastGraph.executable, LastGraph.decisions, LastGraph.kind = captured.exe, captured.decisions, kind
                LastGraph.n_nodes = captured.n_nodes
                nodes += captured.n_nodes
                continue
            if _run(device, step.items, automatic=True, explicit=explicit,
                    kind=kind, skip_donated=True, step=step) is not None:
                nodes += LastGraph.n_nodes
        except FailedOpError as e:   # contained (sync/failures.py): the other devices still run
            failed = failed or e
    timeline.sync_ends(kind, started, nodes=nodes, line=timeline.user_line() if started else "")
    if failed is not None:
        raise failed
    return nodes


def _sync_begins() -> int:
    """The host timeline's mark at a sync's start (0 while nothing is recorded)."""
    return timeline.sync_begins(metrics.counter_value("TracedOps") or 0) if timeline.REC.on else 0


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
        _implied_barrier("optimizer.step (after GradScaler.update)")


def _implied_barrier(reason: str) -> None:
    close_scaler_step()
    with _runtime_lock():
        nodes = _barrier("implied step barrier (optimizer.step)", explicit=True)
    barriers.record(reason, nodes)


def cut_graphs() -> None:
    """Graph size cap reached: warn (once), then materialise all pending work (automatic
    aliasing stays safe via the planner). Never explicit donors, even with explicit
    donation enabled: the cut happens at an op the user did not choose, often one that
    reads the marked tensor, which then raised DonatedBufferError at a random op
    (differential tester)."""
    barriers.warn_graph_size(config.SETTINGS.graph_op_limit)
    with _runtime_lock():
        metrics.counter_add("GraphSizeCut")
        nodes = _barrier("graph size cut", explicit=False)
    barriers.record("graph size cap (LAZYXLA_GRAPH_OP_LIMIT)", nodes)


def _check_lazy(tensors, what: str) -> list:
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    out = []
    for t in tensors:
        if not isinstance(t, LazyTensor):
            raise TypeError(f"lazyxla: {what} expects lazyxla tensors, got a "
                            f"{t.device if isinstance(t, torch.Tensor) else type(t).__name__} "
                            f"{'tensor' if isinstance(t, torch.Tensor) else 'value'}; "
                            "move it with t.to(lx.device()) first")
        out.append(t)
    return out


def eager_run(storages: list) -> None:
    """Eager mode (experimental/eager.py): run the pending work of `storages`, the ones
    an op just wrote, now, as one graph per device; donors as a partial sync's. Called
    from the op's dispatch, which holds the runtime lock."""
    STATE.traced_since_sync = 0
    groups: dict = {}
    for st in storages:
        groups.setdefault(st.device, []).append(st)
    for device, group in groups.items():
        _run(device, _pending(group), automatic=True, explicit=switches.explicit_donation_enabled(device),
             kind="eager op", eager=True)


def _by_device(tensors: Iterable[LazyTensor]) -> dict:
    groups: dict = {}
    seen: set = set()
    for t in tensors:
        st = t._st
        if id(st) not in seen:
            seen.add(id(st))
            groups.setdefault(st.device, []).append(st)
    return groups


def sync_tensors(tensors, *, wait: bool = True, donate_inplace: bool = True) -> None:
    """Partial sync of just `tensors`; never donates a buffer another live tensor needs."""
    tensors = _check_lazy(tensors, "sync_tensors")
    with _runtime_lock():
        started = _sync_begins()
        for device, storages in _by_device(tensors).items():
            _run(device, _pending(storages), automatic=donate_inplace,
                 explicit=switches.explicit_donation_enabled(device), kind="partial sync")
        timeline.sync_ends("partial sync", started, line=timeline.user_line() if started else "")
    if wait:
        wait_device_ops()


def host_values(tensors: list, allow_explicit: bool = True) -> list:
    """CPU copies of `tensors` (views included); materialises their bases, donates nothing
    unless explicit donation is enabled (and `allow_explicit`)."""
    tensors = _check_lazy(tensors, "host read")
    with LOCK:
        started = _sync_begins()
        # Tensors that already hold device data are read before any graph runs: with
        # explicit donation enabled, the graph of this same read (e.g. for a view in
        # `[a, a[0]]`) may donate a marked buffer that was asked for.
        # Views of device data are read the same way, sliced on the device outside any
        # step graph: no graph to compile for a transposed `.grad`, nothing donated.
        early = _read_device_data(tensors)
        results: dict = {}
        for device, storages in _by_device(tensors).items():
            items = _pending(storages)
            position = {id(st): i for i, (_, st) in enumerate(items)}
            slots = {}
            for t in tensors:
                if t._st.device != device or id(t) in early:
                    continue
                if t._view is None:
                    slots[id(t)] = position[id(t._st)]
                    continue
                node = t.checked_value()
                slots[id(t)] = len(items)
                items.append((node, None))
            if not items:      # all device data, read above
                continue
            extra = _read_extra(device, storages, items)
            on_host, outs = _compute_read(device, storages, items, extra, allow_explicit)
            if on_host:    # the storages stay pending
                early.update((key, outs[slot]) for key, slot in slots.items())
                continue
            for t in tensors:
                if t._st.device == device and id(t) in slots and t._view is not None:
                    results[id(t)] = outs[_slot_of(items, slots[id(t)])]
        hosts = []
        for t in tensors:
            if id(t) in early:
                hosts.append(early[id(t)])
                continue
            value = results.get(id(t))
            if value is None:
                data = t.checked_value().data
                value = data.host_copy if data.host_copy is not None else data.live_array()
            # a value the host computed (sync/host_split.py) may be a handle's host copy
            hosts.append(value.clone() if isinstance(value, torch.Tensor) else download(value, t.dtype))
        _recount_pending_ops()
        timeline.sync_ends("host read", started, tensors=len(tensors), line=timeline.user_line() if started else "")
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
    (sync/view_read.py); the rest need a graph."""
    hosts: dict = {}
    for t in tensors:
        st = t._st
        if st.value.op is not DATA:
            continue
        data = st.value.data
        if t._view is None:
            hosts[id(t)] = (data.host_copy.clone() if data.host_copy is not None
                            else download(data.live_array(), t.dtype))   # raises for a donated buffer
        else:
            hosts[id(t)] = read_view(data, st.value, t._view)
    return hosts


def _read_extra(device: int, storages: list, items: list) -> list:
    """Other live pending storages a host read of `storages` materializes in its graph:
    all of the device's pending work for a wide read (frontend/storage.py
    `mark_wide_read`, GradScaler's found_inf), else those sharing pending work with the
    read (sync/barriers.py), so no later sync computes that work again."""
    own = set(map(id, storages))
    if any(is_wide_read(st) for st in storages):
        return [item for item in _pending(live_storages(device)) if id(item[1]) not in own]
    if not barriers.implied_barriers_enabled():
        return []
    return barriers.sharing_items(device, [node for node, _ in items], own)


def _compute_read(device: int, storages: list, items: list, extra: list, allow_explicit: bool) -> tuple:
    """Where a host read's graph runs, decided in one place: `(True, values)` when it
    replays on the host (sync/host_eval.py: small, and what it shares with live tensors is
    trivial to compute again; its storages stay pending), else `(False, outputs)` of the
    device graph, with its integer bookkeeping on the host beside it (`_run_read`)."""
    if not any(is_wide_read(st) for st in storages):
        values = host_eval.evaluate([node for node, _ in items], [node for node, _ in extra])
        if values is not None:
            return True, values
    if extra:
        metrics.counter_add("WideRead")
    explicit = allow_explicit and switches.explicit_donation_enabled(device)
    return False, _run_read(device, items, extra, explicit)


def _run_read(device: int, items: list, extra: list, explicit: bool) -> tuple:
    """Run a host read's graph, its integer bookkeeping on the host (sync/host_split.py);
    `extra` roots come after `items`, so slots stay put. The extra storages are synced as
    a partial sync would: their in-place updated buffers are donated when nothing else
    needs them; what the read reads never is. If some extra root needs a donated buffer,
    the read falls back to its own roots."""
    def on_device(owners: set):
        return lambda device_items, written=frozenset(), leaves=None: _run(
            device, device_items, automatic=bool(owners), explicit=explicit, kind="host read",
            auto_owners=owners, written=written, leaves=leaves) or ()
    try:
        return host_split.run(device, items + extra, on_device({id(st) for _, st in extra}))
    except DonatedBufferError:
        if not extra:
            raise
        return host_split.run(device, items, on_device(set()))


def _slot_of(items: list, position: int) -> int:
    """Output slot of items[position] (collect() dedupes equal roots)."""
    seen: dict = {}
    for i, (node, _) in enumerate(items):
        slot = seen.setdefault(id(node), len(seen))
        if i == position:
            return slot
    raise IndexError(position)


def host_value(t: LazyTensor) -> torch.Tensor:
    return host_values([t])[0]


def wait_device_ops() -> None:
    wait_all()


def pending_graphs(tensors=None, *, automatic: bool = True, explicit: Optional[bool] = None) -> list:
    """(graph, donors) per device that a sync would run, without compiling or running it:
    a step barrier's when `tensors` is None, else a partial sync of `tensors`.
    `explicit=None` means "as that sync would": always at a barrier, else if enabled."""
    with LOCK:
        if tensors is None:
            groups = {d: live_storages(d) for d in live_devices()}
        else:
            groups = _by_device(_check_lazy(tensors, "graph inspection"))
        result = []
        for device, storages in groups.items():
            items = _pending(storages)
            if not items:
                continue
            graph, targets = collect(device, items, merge_scalars=True)
            use_explicit = explicit if explicit is not None else (
                tensors is None or switches.explicit_donation_enabled(device))
            donors, _ = plan_donors(graph, targets, live_storages(device), automatic=automatic,
                                    explicit=use_explicit, aliasing=switches.aliasing_enabled(device),
                                    kind="inspection")
            result.append((graph, donors))
        return result


def graph_hash(tensors) -> str:
    """Key of the graph a sync of `tensors` would compile, with its donors (explicit
    donors only when explicit donation is enabled, as upstream `_get_graph_hash`)."""
    tensors = _check_lazy(tensors, "graph_hash")
    graphs = pending_graphs(tensors, automatic=False)
    return key_hex(tuple(graph.key + (donors,) for graph, donors in graphs))


# import-time seam: the frontend, a layer below, reaches sync through these (frontend/sync_hooks.py)
sync_hooks.install(host_values, cut_graphs, eager_run, optimizer_stepped, scaler_updated)
