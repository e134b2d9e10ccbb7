"""One sync's graph through named stages: collect -> plan donors -> compile -> execute -> install.

Every entry point (sync/api.py, sync/host_read.py) says what it wants as a `Request`: the
roots, the kind of sync (a label carried into the donor plan, the error notes, the
timeline and `lx.debug.donation_report`) and the donors it allows. `run_graph` passes it
through the stages, each taking the one before's typed result (`Collected`, `Planned`,
`Ran`) and recording its phase on the host timeline. A stage that fails hands its error
to the failure path beside them (sync/failures.py): what cannot be contained is raised
there; a contained failure gives back the roots that did not need the failed op, which
`run_graph` runs as the next graph of its loop, raising the first failure once at the end.

Design: docs/design.md, "sync/pipeline.py, sync/api.py, sync/host_read.py".
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from .. import metrics
from ..alias import switches
from ..alias.planner import plan_donors
from ..compile.cache import Executable, get_or_compile
from ..errors import DonatedBufferError, ExecutionFailure, LoweringError
from ..frontend.storage import live_storages
from ..frontend.tracing import forget_lifted_scalars
from ..ir.graph import Graph, reads_donated
from ..runtime import timeline
from ..runtime.execute import execute
from ..state import STATE
from . import failures, step_capture
from .collect import collect
from .install import install
from .placeholders import Placeholder, placeholder_refusal


class Request(NamedTuple):
    """What an entry point asks of one device's graph."""
    device: int
    items: list                     # (root node, storage or None) pairs
    kind: str                       # "step barrier", "implied step barrier (optimizer.step)", "host read", ...
    automatic: bool                 # automatic donors allowed (alias/planner.py)
    explicit: bool                  # explicit donors (lx.set_buffer_donation) allowed
    skip_donated: bool = False      # leave roots that read a donated buffer pending (step barriers)
    eager: bool = False             # one eager op's graph (experimental/eager.py), timed apart
    auto_owners: Optional[set] = None   # ids of the only storages whose buffers may be automatic donors
    written: frozenset = frozenset()    # ids of storages the same sync writes from the host
    leaves: Optional[dict] = None       # id(node) -> DATA node read in its place (collect())
    step: Optional[step_capture.Attempt] = None   # a step barrier's capture attempt; None breaks a step's capture
    # called with (graph, targets, executable, decisions) once the outputs are installed: a
    # step barrier's capture (sync/step_capture.py `record`) or a host read's
    # (sync/read_capture.py) keeps the graph its next identical run replays
    record: Optional[Callable] = None
    live: Optional[list] = None         # the device's live storages where the entry point has them (a barrier)


class Collected(NamedTuple):
    graph: Graph
    targets: list                   # (storage, output slot) pairs that receive the results
    items: list                     # the roots collected (a step barrier drops unreadable ones)


class Planned(NamedTuple):
    collected: Collected
    donors: tuple                   # parameter indices the executable donates
    decisions: list                 # one alias/planner.py Decision per parameter


class Ran(NamedTuple):
    planned: Planned
    executable: Executable
    outs: tuple                     # every output array, by output slot


class Result(NamedTuple):
    outputs: tuple                  # one per distinct root of the request, in first-seen order
    nodes: int                      # IR nodes the graph computed


class LastGraph:
    """What the most recent execution did, for lx.debug.donation_report()."""
    executable: Optional[Executable] = None
    decisions: list = []
    kind: str = ""
    n_nodes: int = 0


def run_graph(request: Request) -> Optional[Result]:
    """Run `request`'s graph; None when there was nothing to run. A failed graph's roots
    that did not need the failed op run as the next graph, then the failure is raised."""
    forget_lifted_scalars()   # ops traced from here on start a new sharing pattern
    if request.step is None:   # any other sync in the middle of a step: not the captured step
        step_capture.note_read(request.device)
    else:
        replayed = replay_stage(request)
        if replayed is not None:
            return replayed
    first: Optional[failures.Contained] = None
    while request.items:
        try:
            collected = collect_stage(request)
            planned = plan_stage(request, collected) if collected is not None else None
        except Exception as error:  # noqa: BLE001 - the rest of a failed sync: said with its failure
            if first is None:
                raise
            failures.note_later(first, request.kind, error)
            break
        if planned is None:
            break
        try:
            result = install_stage(request, execute_stage(request, planned, compile_stage(request, planned)))
        except Exception as error:  # noqa: BLE001 - the failure path decides what it is
            if not failures.containable(error):
                if first is None:
                    raise failures.not_applied(request.kind, collected.graph.device, error)
                failures.note_later(first, request.kind, error)
                break
            contained = failures.contain(collected.graph, collected.items, error)
            if first is None:
                first = contained
            else:
                failures.note_later(first, request.kind, contained.error)
            request = request._replace(items=contained.rest, step=None, record=None)   # another graph: not the step's
            continue
        if first is None:
            return result
        break
    if first is not None:
        try:
            raise first.error from first.cause
        finally:   # no cycle through this frame: the tensors the error's graph held are freed with it
            del first, contained
    return None


def collect_stage(request: Request) -> Optional[Collected]:
    """The graph of the request's roots, timed; refused while a function is captured."""
    started = timeline.start()
    collected = collect_roots(request)
    if collected is None:
        return None
    if any(type(d) is Placeholder for d in collected.graph.params):
        raise placeholder_refusal()
    timeline.mark("collect", started, nodes=len(collected.graph.order))
    return collected


def collect_roots(request: Request) -> Optional[Collected]:
    """The graph of the request's roots (sync/collect.py); None when a step barrier finds
    every root reading a donated buffer."""
    items = request.items
    try:
        graph, targets = collect(request.device, items, merge_scalars=True, leaves=request.leaves)
    except DonatedBufferError:
        if not request.skip_donated:
            raise
        # A pending tensor computed from a donated buffer (e.g. `v + 1` for a view `v`
        # of a donated tensor) can never be evaluated. A step barrier leaves it
        # pending instead of failing, so a donated tensor that stays referenced never
        # disturbs the syncs of other tensors; using it still raises DonatedBufferError.
        items = [item for item in items if not reads_donated(item[0])]
        if not items:
            return None
        graph, targets = collect(request.device, items, merge_scalars=True, leaves=request.leaves)
    return Collected(graph, targets, items)


def donor_plan(request: Request, graph: Graph, targets: list) -> tuple[tuple, list]:
    """(donors, decisions) of `graph` for the request's kind of sync (alias/planner.py)."""
    device = request.device
    live = request.live if request.live is not None else live_storages(device)
    return plan_donors(graph, targets, live, automatic=request.automatic,
                       explicit=request.explicit, aliasing=switches.aliasing_enabled(device),
                       kind=request.kind, auto_owners=request.auto_owners, written=request.written)


def plan_stage(request: Request, collected: Collected) -> Planned:
    started = timeline.start()
    donors, decisions = donor_plan(request, collected.graph, collected.targets)
    timeline.mark("plan", started, donors=len(donors))
    if STATE.op_records and not request.eager:   # detailed records (lx.metrics.set_op_records)
        metrics.metric_add("TensorsGraphSize", len(collected.graph.order))
    return Planned(collected, donors, decisions)


def compile_stage(request: Request, planned: Planned) -> Executable:
    """The executable, from the cache or compiled; a lowering or XLA compile error leaves
    as the `ExecutionFailure` of its stage."""
    started = timeline.start()
    try:
        exe = get_or_compile(planned.collected.graph, planned.donors, request.eager)
    except LoweringError as e:
        # compile/program.py names the node whose lowering failed; without one, XLA refused the graph
        stage = ExecutionFailure.COMPILE if e.node_position is None else ExecutionFailure.LOWER
        raise ExecutionFailure(stage, e, node_position=e.node_position) from e
    timeline.mark("key and cache", started)
    return exe


def execute_stage(request: Request, planned: Planned, exe: Executable) -> Ran:
    """Launch the executable (runtime/execute.py marks its donors once it has run)."""
    return Ran(planned, exe, execute(planned.collected.graph, exe, request.eager))


def install_stage(request: Request, ran: Ran) -> Result:
    """The outputs become the targets' values (sync/install.py)."""
    started = timeline.start()
    graph = ran.planned.collected.graph
    install(graph, ran.planned.collected.targets, ran.outs, ran.executable)
    timeline.mark("install", started, outputs=len(ran.outs))
    if request.record is not None:   # a captured step or read keeps what its next run needs
        request.record(graph, ran.planned.collected.targets, ran.executable, ran.planned.decisions)
    note_ran(request.kind, ran.executable, ran.planned.decisions, len(graph.order))
    return Result(tuple(ran.outs[slot] for slot in graph.root_slots), len(graph.order))


def replay_stage(request: Request) -> Optional[Result]:
    """A step barrier's graph seen before, run as its recorded executable with its outputs
    installed in one pass (sync/step_capture.py); None where the stages must run."""
    replayed = step_capture.replay(request.step, request.kind)
    if replayed is None:
        return None
    captured, outs = replayed
    note_ran(request.kind, captured.exe, captured.decisions, captured.n_nodes)
    return Result(tuple(outs[slot] for slot in captured.root_slots), captured.n_nodes)


def note_ran(kind: str, exe: Executable, decisions: list, nodes: int) -> None:
    """The graph of a sync of `kind` ran `exe` (what lx.debug.donation_report() shows)."""
    LastGraph.executable, LastGraph.decisions, LastGraph.kind = exe, decisions, kind
    LastGraph.n_nodes = nodes
