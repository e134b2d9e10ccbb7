"""A captured step: a step barrier made of compiled calls, replayed as one executable call.

A compiled training step (`torch.compile(..., backend="lazyxla")` forward, backward and
optimizer step) or a decode loop's token leaves at its barrier a pending graph of a few CALL
nodes (dynamo/replay.py, capture/function.py), their outputs, the buffers they read and a few
lazily traced ops. Each CALL is logged here as it is inserted. At the barrier, one pass over
the live storages and the logged calls' operands (sync/fingerprint.py) gathers what the executable needs (pending
storages, device buffers, lifted scalars) and builds the step's fingerprint: each call's
signature, where each operand comes from (a buffer by first appearance, an output of an
earlier logged call, a lifted scalar, a traced node by its signature and its operands'
sources), each pending storage's source, and per buffer what the donor plan depends on (its
owner's place among the pending storages, other tensors holding it, its donation flags). A
fingerprint seen at an earlier barrier names that barrier's executable, donors, parameter and
scalar order and output slots: the step runs as one call and its outputs are installed in one
pass, with no graph walk, no donor plan and no cache key. A new fingerprint runs the ordinary
barrier's stages (sync/pipeline.py `run_graph`) and records it. The fingerprint also holds what
else makes another program: the storage dtype policy's token (the TPU's default policy holds
64-bit types in 32 bits; a recorded step keeps the dtypes its scalars travel in), the matmul
precision, whether aliasing is on. Entry values (sync/entries.py) the barrier reads as staged
device data count as the buffers they are, in place of the IR they stand for.

A host read that ends a decode token (`generate()`'s stopping check) is captured with the same
pass (`walk`) and its host bookkeeping split: sync/read_capture.py.

Not captured (the ordinary barrier runs, `lx.debug.step_capture()` says why): more than
`_MAX_TRACED` lazily traced nodes, a host read or partial sync since the last barrier, merged
scalars of a long chain, SPMD, a graph size cut, `LAZYXLA_STEP_CAPTURE=0`.

Design: docs/design.md, "A captured step (issue 51)".
"""
from __future__ import annotations

from collections import OrderedDict
from itertools import chain
from operator import itemgetter
from typing import NamedTuple, Optional

from .. import config, metrics
from ..compile.cache import Executable
from ..ir.graph import Graph
from ..ir.node import Node
from ..errors import ExecutionFailure
from ..ir.scalars import scalar_values, travel_dtypes
from ..runtime import placement
from ..runtime.execute import execute_params
from ..state import STATE
from . import failures
from .fingerprint import header, holders, walk
from .install import install_outputs

# calls logged per device between barriers; a loop that reaches no barrier and no device read
# (its reads all replayed on the host) stops logging here instead of growing the log
_MAX_CALLS = 64
_MAX_CAPTURES = 8   # fingerprints kept per process (a train and an eval step, accumulation)
# lazily traced nodes a step may hold beside its compiled calls (backward's ones_like, a loss
# computed outside torch.compile, a decode loop's argmax and next position); each is a part of
# the fingerprint, so this bounds the pass
_MAX_TRACED = 64


class Outcome(NamedTuple):
    """What the last step barrier did with its capture: `replayed`, `recorded` (ran the
    ordinary barrier and keeps its executable for the next identical step) or `not captured`,
    and why."""
    outcome: str
    reason: str


class _Log:
    __slots__ = ("calls", "outputs", "broken")

    def __init__(self) -> None:
        self.calls: list[Node] = []      # CALL nodes inserted since the last barrier, in order
        self.outputs: list[list] = []    # per call, its GETITEM nodes (capture/function.py)
        self.broken: Optional[str] = None


class Captured:
    """A recorded step: what its fingerprint's next barrier runs."""
    __slots__ = ("exe", "decisions", "gather", "scalar_gather", "packed", "travel", "slots", "root_slots",
                 "n_nodes")

    def __init__(self, exe: Executable, decisions: list, gather: tuple, scalar_gather: tuple, graph: Graph,
                 slots: tuple) -> None:
        self.exe = exe
        self.decisions = decisions   # the donor plan's, for lx.debug.donation_report()
        self.gather = gather         # per executable parameter, its buffer's position in the pass
        self.scalar_gather = scalar_gather   # per scalar operand, its node's position in the pass
        self.packed = graph.packed_scalars   # the scalars travel packed (ir/scalars.py)
        self.travel = travel_dtypes(graph)   # and in these dtypes (32 bits where the policy narrows)
        self.slots = slots           # per pending storage, in live order, its output slot
        self.root_slots = graph.root_slots   # per distinct root, in first-seen order, its output slot
        self.n_nodes = len(graph.order)


class Attempt:
    """One barrier's pass (module docstring): the pending items in live order, the buffers
    read in first-seen order (entry values' staged buffers among them), and the fingerprint
    (None where the step cannot be captured)."""
    __slots__ = ("device", "items", "leaves", "scalars", "fingerprint")

    def __init__(self, device: int, items: list, leaves: list, scalars: list, fingerprint: Optional[tuple]) -> None:
        self.device = device
        self.items = items
        self.leaves = leaves
        self.scalars = scalars       # lifted scalar nodes in first-seen order
        self.fingerprint = fingerprint


_LOGS: dict[int, _Log] = {}
_CAPTURES: OrderedDict = OrderedDict()
LAST = [Outcome("not captured", "no step barrier yet")]


def enabled() -> bool:
    return config.SETTINGS.step_capture


def note_call(device: int, outputs: list) -> None:
    """A CALL node was inserted into `device`'s pending graph (capture/function.py); `outputs`:
    the GETITEM node of each of its outputs."""
    if STATE.captures:   # inside a capture: a node of the captured program, not of the step
        return
    log = _LOGS.get(device)
    if log is None:
        log = _LOGS[device] = _Log()
    if len(log.calls) >= _MAX_CALLS:
        log.broken = f"more than {_MAX_CALLS} compiled calls since the last barrier"
        return
    log.calls.append(outputs[0].args[0])
    log.outputs.append(outputs)


def has_calls(device: int) -> bool:
    """Whether a compiled call was logged on `device` since the last barrier or device read."""
    log = _LOGS.get(device)
    return log is not None and bool(log.calls)


def note_read(device: int) -> None:
    """A host read or partial sync ran on `device` between barriers: the step that follows
    is not the captured one (it falls back, and `lx.debug.step_capture()` says so)."""
    log = _LOGS.get(device)
    if log is not None and log.calls:
        log.broken = "a host read or partial sync ran in the middle of the step"
        log.calls.clear()   # the read ran or replaced what they computed
        log.outputs.clear()


def begin(device: int, live: list, items: list, entry_leaves: Optional[dict], kind: str) -> Attempt:
    """The barrier's pass over `live` (the device's live storages), `items` (its pending
    ones, sync/entry.py `pending_items`), and its log; `entry_leaves`: the barrier's entry
    values (sync/entries.py `leaves`, read in place of the IR they stand for)."""
    log = _LOGS.pop(device, None)
    if not items:   # nothing pending (an lx.sync() right after an implied barrier)
        return Attempt(device, items, [], [], None)
    reason = _refusal(log, kind)
    if reason:
        return _refused(device, items, reason)
    leaves: list = []
    scalars: list = []
    parts = header(device)
    parts += [call.sig for call in log.calls]
    roots = chain.from_iterable([call.inputs for call in log.calls] + [map(itemgetter(0), items)])
    fingerprint = walk(parts, log.outputs, roots, entry_leaves or {}, holders(live, items), _MAX_TRACED,
                       leaves, scalars)
    if isinstance(fingerprint, str):
        return _refused(device, items, fingerprint)
    return Attempt(device, items, leaves, scalars, fingerprint)


def _refusal(log: Optional[_Log], kind: str) -> str:
    if not enabled():
        return "off (LAZYXLA_STEP_CAPTURE=0)"
    if kind == "graph size cut":
        return "a graph size cut (no explicit donors there)"
    if log is None or not log.calls:
        return log.broken if log is not None and log.broken else "no compiled call in the step"
    if log.broken:
        return log.broken
    if placement.spmd_enabled():
        return "SPMD"
    return ""


def _refused(device: int, items: list, reason: str) -> Attempt:
    LAST[0] = Outcome("not captured", reason)
    metrics.counter_add("StepCaptureFallback")
    return Attempt(device, items, [], [], None)


def replay(attempt: Attempt, kind: str) -> Optional[tuple[Captured, tuple]]:
    """Run the step (a sync of `kind`) as its recorded executable when its fingerprint is
    known: the captured step and its output arrays, installed (None: the ordinary barrier
    must run, then `record`)."""
    if attempt.fingerprint is None:
        return None
    captured = _CAPTURES.get(attempt.fingerprint)
    if captured is None:
        return None
    outs = run_recorded(captured, _CAPTURES, attempt.fingerprint, [attempt.leaves[p] for p in captured.gather],
                        attempt.scalars, attempt.device, attempt.items, kind)
    if outs is None:
        return None
    LAST[0] = Outcome("replayed", "")
    return captured, outs


def run_recorded(captured: Captured, table: OrderedDict, fingerprint: tuple, params: list, scalars: list,
                 device: int, items: list, kind: str) -> Optional[tuple]:
    """Run `captured` (a step's, or a read's: sync/read_capture.py) on `params` and this run's
    `scalars`, install its outputs into the storages of `items` (`(root, storage or None)`, as
    recorded) and count the replay: the output arrays. None where the call failed: `table`
    forgets `fingerprint` and the ordinary stages run (`call_failed`)."""
    try:
        outs = call(captured, params, scalars, device)
    except Exception as e:
        table.pop(fingerprint, None)
        call_failed(e, kind, device)
        return None
    install_outputs(captured.exe.outputs, device,
                    [(st, slot) for (_, st), slot in zip(items, captured.slots) if st is not None], outs)
    metrics.counter_add("CachedCompile")   # its executable, found without a key: still a cached graph
    metrics.counter_add("StepCaptureReplay")
    return outs


def call(captured: Captured, params: list, scalars: list, device: int) -> tuple:
    """Run `captured`'s executable on `params` (its parameters, gathered) and this run's
    values of the scalars the pass met (`scalars`, in first-seen order)."""
    gathered = [scalars[p] for p in captured.scalar_gather]
    if gathered:   # this run's values, sent with it as the ordinary stages send them
        metrics.counter_add("UploadedScalars", len(gathered))
    args = scalar_values(gathered, captured.packed, captured.travel) if gathered else []
    return execute_params(captured.exe, params, args, device, (device,))


def call_failed(error: Exception, kind: str, device: int) -> None:
    """`call` raised and nothing was installed (the caller forgets the capture). Unless the
    backend consumed donated buffers before failing (then their tensors raise
    DonatedBufferError, as after the ordinary stages' failure, and this raises), the
    ordinary stages run the graph again and report the failure their way."""
    if isinstance(error, ExecutionFailure) and error.lost_buffers:
        raise failures.not_applied(kind, device, error)   # as the stages raise it
    LAST[0] = Outcome("not captured", f"the captured call failed ({type(error).__name__}); ran the ordinary stages")


def gather_orders(graph: Graph, leaves: list, scalars: list, uploads: list = ()) -> Optional[tuple]:
    """(per parameter of `graph`, its buffer's position in `leaves`, or -1 - k for the
    k-th of `uploads`; per scalar operand, its node's position in `scalars`); None where
    the graph reads a value met in none of them."""
    position = {id(d): i for i, d in enumerate(leaves)}
    position.update((id(d), -1 - k) for k, d in enumerate(uploads))
    gather = tuple(position.get(id(d)) for d in graph.params)
    scalar_position = {id(n): i for i, n in enumerate(scalars)}
    scalar_gather = tuple(scalar_position.get(id(n)) for n in graph.scalars)
    if None in gather or None in scalar_gather:
        return None
    return gather, scalar_gather


def record(attempt: Attempt, graph: Graph, targets: list, exe: Executable, decisions: list) -> None:
    """The ordinary barrier ran `attempt`'s items as `graph` with `exe`: keep what its next
    identical step needs (sync/pipeline.py's install stage calls this once the outputs are
    installed)."""
    if attempt.fingerprint is None:
        return
    if graph.merged_scalars is not None or len(targets) != len(attempt.items):
        LAST[0] = Outcome("not captured", "the step graph merges equal scalars (a long chain), or has "
                                          "tensors it could not compute")
        return
    orders = gather_orders(graph, attempt.leaves, attempt.scalars)
    if orders is None:
        LAST[0] = Outcome("not captured", "the step graph reads a value the pass did not meet")
        return
    _CAPTURES[attempt.fingerprint] = Captured(exe, decisions, *orders, graph, tuple(slot for _, slot in targets))
    while len(_CAPTURES) > _MAX_CAPTURES:
        _CAPTURES.popitem(last=False)
    metrics.counter_add("StepCaptureRecord")
    LAST[0] = Outcome("recorded", "")
