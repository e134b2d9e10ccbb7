"""A captured token: a host read that ends a decode token, replayed as one executable call.

Hugging Face `generate()` ends each token in a host read (the stopping check), whose graph
sync/host_split.py splits into host bookkeeping and one device graph (the compiled forward's
CALL, the logits processors, the argmax). Once such a read has run, the next read of the same
fingerprint is the same split and the same device graph: its host bookkeeping is replayed
(its values change every token), and the device graph runs as the executable recorded for
it, with no graph walk, no donor plan and no cache key.

The fingerprint is sync/fingerprint.py's pass (`walk`) over the read's roots (and the live
tensors it materializes alongside, sync/host_read.py), keeping every node met in a fixed
order, with two differences. A node that may be bookkeeping (integral, at most
`host_bookkeeping_max_elements` elements) enters by what the split decides it by, not its
shape (host_split.py `SplitKeys`): generate()'s `input_ids` grow every token, on the host.
Whether a node of the device graph keeps its signature is checked at each replay (`checks`),
so a device graph of another shape is never replayed. And the fingerprint says, per buffer,
whether pending work outside the read reads it (the donor plan keeps those), found after the
pass and only for a read that may be captured: a fingerprint known to have nothing to split
(a loss read) stops there.

Not captured (`lx.debug.step_capture()` says why, `StepCaptureFallback` counts): a read with no
call logged since the last read or barrier (lazy mode), no bookkeeping to split, more than
`_MAX_NODES` nodes, a read of a donated, failed or sharded buffer, SPMD, bookkeeping off
(`LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS=0`), a host replay that fails, a graph merging equal
scalars, `LAZYXLA_STEP_CAPTURE=0`.

Design: docs/design.md, "A captured step (issue 51)".
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional

from .. import metrics
from ..compile.cache import Executable
from ..frontend.storage import live_storages
from ..frontend.tracing import forget_lifted_scalars
from ..ir.graph import Graph, data_reachable
from ..ir.node import DATA
from ..runtime import backend, placement
from . import fingerprint as fingerprint_pass, host_split, step_capture
from .pipeline import note_ran
from .step_capture import LAST, Outcome

KIND = "host read"
_MAX_NODES = 256     # nodes a read's pass meets before it gives up (a compiled forward's token: ~120)
_MAX_CAPTURES = 8    # fingerprints kept, and as many with nothing to split (generate()'s tokens alternate between two)


class Captured(step_capture.Captured):
    """A recorded read: its split as positions in the pass's node order, and its device graph."""
    __slots__ = ("before", "after", "uploads", "for_host", "on_device", "checks")

    def __init__(self, exe: Executable, decisions: list, orders: tuple, graph: Graph, slots: tuple,
                 split: tuple, checks: tuple) -> None:
        super().__init__(exe, decisions, *orders, graph, slots)
        # positions of the split's nodes; `on_device`: of the items whose root the device computes
        self.before, self.after, self.uploads, self.for_host, self.on_device = split
        self.checks = checks   # (position, signature) of device nodes the fingerprint keys loosely


class Attempt:
    """One read's pass: its items, the nodes, buffers and scalars met, the fingerprint (None:
    not captured) and the capture it names (None: the ordinary read runs and records)."""
    __slots__ = ("device", "items", "nodes", "leaves", "scalars", "shape", "fingerprint", "captured")

    def __init__(self, device: int, items: list) -> None:
        self.device = device
        self.items = items
        self.nodes: list = []
        self.leaves: list = []
        self.scalars: list = []
        self.shape: Optional[tuple] = None         # the fingerprint without what outside work reads
        self.fingerprint: Optional[tuple] = None
        self.captured: Optional[Captured] = None


_CAPTURES: OrderedDict = OrderedDict()   # fingerprint -> Captured
_NO_SPLITS: OrderedDict = OrderedDict()  # fingerprints (less what outside work reads) with nothing to split
_NO_SPLIT = "host read: no bookkeeping to split"


def begin(device: int, items: list, n_own: int, explicit: bool) -> Attempt:
    """The pass over a host read's `items` (its own `n_own` first, then the live tensors it
    materializes alongside); `explicit`: explicit donors allowed."""
    attempt = Attempt(device, items)
    limit = backend.setting("host_bookkeeping_max_elements")
    reason = _refusal(device, limit)
    if reason:
        return _refused(attempt, reason)
    live = live_storages(device)
    parts = fingerprint_pass.header(device) + [KIND, n_own, explicit, limit]
    fingerprint = fingerprint_pass.walk(parts, [], [node for node, _ in items], {},
                                        fingerprint_pass.holders(live, items), _MAX_NODES, attempt.leaves,
                                        attempt.scalars, attempt.nodes, host_split.split_keys(limit))
    if isinstance(fingerprint, str):
        return _refused(attempt, fingerprint.replace("step", "read"))
    if fingerprint in _NO_SPLITS:   # seen before: nothing to capture (a loss read)
        return _refused(attempt, _NO_SPLIT)
    # which buffers pending work outside the read reads (the donor plan keeps them): a read's
    # graph is not all pending work (generate()'s `input_ids` cat stays pending every other token)
    inside = {id(st) for _, st in items if st is not None}
    outside = [st.value for st in live if st.value.op is not DATA and id(st) not in inside]
    needed = data_reachable(outside) if outside else ()
    attempt.shape = fingerprint
    attempt.fingerprint = fingerprint + (tuple(id(d) in needed for d in attempt.leaves),)
    captured = _CAPTURES.get(attempt.fingerprint)
    if captured is not None:
        nodes = attempt.nodes
        if all(nodes[p].sig == sig for p, sig in captured.checks):
            attempt.captured = captured
        else:   # the device graph changed shape where the fingerprint keys loosely: record it again
            LAST[0] = Outcome("not captured", "host read: its device graph has new shapes")
    return attempt


def _refusal(device: int, limit: int) -> str:
    if not step_capture.enabled():
        return "off (LAZYXLA_STEP_CAPTURE=0)"
    # a lazily traced model's read would walk the model (up to _MAX_NODES nodes) on every read
    # of a large graph only to refuse it; a compiled forward's token is a CALL and a few ops (a
    # lazily traced model calling a JAX kernel, attention, has calls too: the bound refuses it)
    if not step_capture.has_calls(device):
        return "host read: no compiled call since the last read (lazy mode)"
    if limit <= 0:
        return "host read: no bookkeeping split (LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS=0)"
    if placement.spmd_enabled():
        return "host read: SPMD"
    return ""


def _refused(attempt: Attempt, reason: str) -> Attempt:
    LAST[0] = Outcome("not captured", reason)
    metrics.counter_add("StepCaptureFallback")
    return attempt


def run(attempt: Attempt, run_device: host_split.RunDevice) -> tuple:
    """host_split.run of the attempt's items: its recorded split and executable when the
    fingerprint is known, else the ordinary split and stages, recorded for the next read."""
    device, items = attempt.device, attempt.items
    captured = attempt.captured
    if captured is not None:
        nodes = attempt.nodes
        at = lambda positions: [nodes[p] for p in positions]   # noqa: E731
        split = host_split.Split(at(captured.before), at(captured.after), at(captured.uploads),
                                 at(captured.for_host), {id(items[i][0]) for i in captured.on_device})
        return host_split.run(device, items, _Replay(attempt, captured, split, run_device).run, split)
    split = host_split.split_read([node for node, _ in items])
    if attempt.fingerprint is None or split is None:
        if attempt.fingerprint is not None:
            _keep(_NO_SPLITS, attempt.shape, True)
            _refused(attempt, _NO_SPLIT)
        return host_split.run(device, items, run_device, split)
    recorder = _Record(attempt, split, run_device)
    outs = host_split.run(device, items, recorder.run, split)
    recorder.keep()
    return outs


def _keep(table: OrderedDict, fingerprint: tuple, value) -> None:
    table[fingerprint] = value
    while len(table) > _MAX_CAPTURES:
        table.popitem(last=False)


class _Record:
    """The ordinary read's device call, observed: its graph, executable and donors."""

    def __init__(self, attempt: Attempt, split: host_split.Split, run_device: host_split.RunDevice) -> None:
        self.attempt, self.split, self.run_device = attempt, split, run_device
        self.calls = 0
        self.device_items: list = []
        self.uploads: list = []
        self.ran: Optional[tuple] = None   # (graph, targets, executable, decisions)

    def run(self, device_items: list, written: frozenset = frozenset(), leaves: Optional[dict] = None) -> tuple:
        self.calls += 1
        if self.calls > 1 or leaves is None:   # the host replay failed: not the split's device graph
            return self.run_device(device_items, written, leaves)
        self.device_items = device_items
        self.uploads = [leaves[id(n)].data for n in self.split.uploads]
        return self.run_device(device_items, written, leaves, record=self._ran)

    def _ran(self, graph: Graph, targets: list, exe: Executable, decisions: list) -> None:
        self.ran = (graph, targets, exe, decisions)

    def keep(self) -> None:
        attempt, split = self.attempt, self.split
        if self.calls == 0:
            _refused(attempt, "host read: computed on the host alone (no device graph)")
            return
        if self.calls != 1 or self.ran is None:
            _refused(attempt, "host read: its host replay failed, or its device graph did not run as one graph")
            return
        graph, targets, exe, decisions = self.ran
        orders = step_capture.gather_orders(graph, attempt.leaves, attempt.scalars, self.uploads)
        slot_of = {id(st): slot for st, slot in targets}
        slots = tuple(None if st is None else slot_of.get(id(st), -1) for _, st in self.device_items)
        if graph.merged_scalars is not None or orders is None or -1 in slots:
            _refused(attempt, "host read: its device graph merges equal scalars, or reads or writes what the "
                              "pass did not meet")
            return
        index = {id(n): p for p, n in enumerate(attempt.nodes)}
        on_device = split.on_device
        positions = (tuple(index[id(n)] for n in split.before), tuple(index[id(n)] for n in split.after),
                     tuple(index[id(n)] for n in split.uploads), tuple(index[id(n)] for n in split.for_host),
                     tuple(i for i, (node, _) in enumerate(attempt.items) if id(node) in on_device))
        keys = host_split.split_keys(backend.setting("host_bookkeeping_max_elements"))
        checks = tuple((p, n.sig) for p, n in enumerate(attempt.nodes)
                       if id(n) in on_device and keys.get(n.sig, n.sig) != n.sig)
        _keep(_CAPTURES, attempt.fingerprint, Captured(exe, decisions, orders, graph, slots, positions, checks))
        metrics.counter_add("StepCaptureRecord")
        LAST[0] = Outcome("recorded", KIND)


class _Replay:
    """The read's device call as its recorded executable (the split's first call; another,
    after a failed host replay, runs the ordinary stages)."""

    def __init__(self, attempt: Attempt, captured: Captured, split: host_split.Split,
                 run_device: host_split.RunDevice) -> None:
        self.attempt, self.captured, self.split, self.run_device = attempt, captured, split, run_device
        self.done = False

    def run(self, device_items: list, written: frozenset = frozenset(), leaves: Optional[dict] = None) -> tuple:
        if self.done or leaves is None:
            return self.run_device(device_items, written, leaves)
        self.done = True
        attempt, captured, device = self.attempt, self.captured, self.attempt.device
        step_capture.note_read(device)   # a read in the middle of a step: that step is not the captured one
        forget_lifted_scalars()          # as run_graph does: later ops start a new sharing pattern
        uploads = [leaves[id(n)].data for n in self.split.uploads]
        buffers = attempt.leaves
        params = [buffers[p] if p >= 0 else uploads[-1 - p] for p in captured.gather]
        outs = step_capture.run_recorded(captured, _CAPTURES, attempt.fingerprint, params, attempt.scalars,
                                         device, device_items, KIND)
        if outs is None:
            return self.run_device(device_items, written, leaves)
        LAST[0] = Outcome("replayed", KIND)
        note_ran(KIND, captured.exe, captured.decisions, captured.n_nodes)
        return tuple(outs[slot] for slot in captured.root_slots)
