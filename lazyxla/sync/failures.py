"""Failures stay contained: a graph that fails to lower, compile or run changes no tensor that
held device data and poisons only the new tensors that needed the failing op.

Before, a failed graph stayed pending and every later sync compiled it again and failed
again (on a TPU, one op XLA refused there failed 247 later tests). Now the stage that failed
(sync/pipeline.py) hands its `ExecutionFailure` (errors.py) here, which
1. finds the op: a lowering error names its node (`ExecutionFailure.node_position`, from
   compile/program.py); for an XLA compile or run error the op is searched
   by bisecting the graph's topological order, compiling (and, for a run error, running)
   the sub-graph of each prefix without donors: about log2(nodes) + 1 probes, only on
   this path, and remembered per graph key for compile errors so a step that fails the
   same way every time searches once;
2. makes the step all or nothing: every live pending tensor of the device that the sync
   would update or whose value needs that op returns to the device data it held before
   its value became pending (frontend/storage.py `last_data`), if it held any and the
   buffer is still there; every other one that needs the op, born since, gets a handle
   with no buffer that carries the error (`DeviceData.failure`): reading or using it
   raises `lx.FailedOpError`, a step barrier no longer collects it, and writing a whole
   new value into it (`copy_`, `.data =`) makes it an ordinary tensor again;
3. returns the rest of the sync's roots, which `run_graph` then runs as their own graph,
   and the error it raises once.
The failed graph itself changed nothing: `execute()` marks donors only after the call
returns, so no input is donated and every input keeps its value. Out-of-memory errors are
not contained (`containable`: they stay retryable, freeing memory may let the same graph
run).

Design: docs/design.md, "sync/failures.py"; the rule: docs/reliability.md.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import torch

from .. import metrics
from ..compile.cache import compile_graph
from ..errors import ExecutionFailure, FailedOpError, LoweringError
from ..frontend.storage import live_storages
from ..ir.bounded import BoundedTable
from ..ir.graph import Graph, positions
from ..ir.build import data_node
from ..ir.node import DATA
from ..ir.walk import is_leaf, reaching
from ..runtime import memory
from ..runtime.device_data import DeviceData
from ..runtime.execute import execute
from ..state import STATE
from .collect import collect

LOWER, COMPILE, RUN = ExecutionFailure.LOWER, ExecutionFailure.COMPILE, ExecutionFailure.RUN
# graph key -> position of the op that made it fail to compile (None: no single op)
_compile_culprits = BoundedTable(256)


class Contained(NamedTuple):
    error: FailedOpError   # what the sync raises, once
    cause: BaseException   # the backend's or the lowering's own error, its cause
    rest: list             # the sync's (root, storage) items that did not need the op


def containable(error: BaseException) -> bool:
    """Whether `error`, raised by a sync's stages (sync/pipeline.py), is a graph's failure
    to contain: a stage's `ExecutionFailure` that is not running out of memory (kept
    retryable: freeing memory may let the same graph run)."""
    return isinstance(error, ExecutionFailure) and not memory.is_out_of_memory(error.error)


def not_applied(kind: str, device: int, error: BaseException) -> BaseException:
    """What a sync raises for an `error` it does not contain, saying that it was not
    applied: the error as it is (a placement refusal, an internal error), or running out
    of memory as `torch.OutOfMemoryError`."""
    failure = error if isinstance(error, ExecutionFailure) else None
    original = error if failure is None else failure.error
    # Compile and execute change nothing before the executable has run (execute() marks
    # donors only after it returns, and install() follows), so the sync is all or
    # nothing: say so, keep the original error type.
    lost = 0 if failure is None else failure.lost_buffers
    note = (f"lazyxla: the {kind} was not applied: "
            + (f"the backend consumed {lost} donated buffer(s) before failing (their tensors now "
               "raise DonatedBufferError); all other" if lost else "nothing was donated and the")
            + " tensors keep their values or pending computation; the next sync retries.")
    if memory.is_out_of_memory(original) and not isinstance(original, torch.OutOfMemoryError):
        # the backend's own out-of-memory (XLA RESOURCE_EXHAUSTED): same type and
        # report as lazyxla's check before running (runtime/memory.py check_fits)
        oom = torch.OutOfMemoryError(f"lazyxla: out of memory on device {device} running the {kind}: "
                                     f"{type(original).__name__}: {original}\n{memory.report_text(device)}")
        oom.add_note(note)
        oom.__cause__ = original   # as `raise oom from original`
        return oom
    original.add_note(note)
    return original


def note_later(first: Contained, kind: str, later: BaseException) -> None:
    """The rest of a sync whose first failure was contained failed too: said with the first."""
    first.error.add_note(f"lazyxla: the rest of the {kind} then failed too: {type(later).__name__}: {later}")


def contain(graph: Graph, items: list, failure: ExecutionFailure) -> Contained:
    """Contain `failure`, raised lowering, compiling or running `graph` (the graph of `items`)."""
    position = _culprit(graph, failure)
    seeds = ({graph.order[position]} if position is not None
             else {graph.order[p] for p in graph.outputs})
    what = _what_failed(graph, position, failure)
    needs = reaching(seeds)   # whether computing a value needs the failed op
    carried = (f"{what}\nThis tensor's value needed that op, so it holds this error instead of a "
               "value. To use the tensor again, give it a new value (t.copy_(new), t.data = new, or "
               "assign a new tensor), or compute it again without the op.")
    updated = {id(st) for _, st in items if st is not None}   # the storages this sync would update
    kept = poisoned = 0
    for st in live_storages(graph.device):
        value = st.value
        if value.op is DATA or not (id(st) in updated or needs(value)):
            continue
        last = _last_data(st)
        if last is not None:   # it held device data: the step is all or nothing, it keeps that
            st.write(data_node(last))
            kept += 1
        elif needs(value):     # born since its device had data: it carries the error
            st.write(data_node(DeviceData(None, value.shape, value.dtype, graph.device, failure=carried)))
            poisoned += 1
    metrics.counter_add("FailedOp")
    rest = [(node, st) for node, st in items if not needs(node) and (st is None or st.value is node)]
    lost = failure.lost_buffers
    inputs = (f"The backend consumed {lost} donated buffer(s) before failing: their tensors raise "
              "DonatedBufferError; every other input keeps its value." if lost else
              "The failed graph donated nothing and every input keeps its value.")
    return Contained(FailedOpError(
        f"{what}\n{poisoned} tensor(s) needed it: they hold this error and raise it when read or used "
        f"(lx.FailedOpError); {kept} tensor(s) that held device data keep it (their updates in this sync "
        f"are not applied: repeat the step, or skip its batch); the {len(rest)} other result(s) of this "
        f"sync are computed. {inputs}"),
        failure.error, rest)


def _last_data(st) -> Optional[DeviceData]:
    """The device data `st` held before its pending value, if its buffer is still there
    (frontend/storage.py `last_data`: held by the pending update that reads it, not donated,
    no failure of its own); else None."""
    data = st.last_data() if st.last_data is not None else None
    if data is None or data.donated_in is not None or data.failure is not None:
        return None
    return data


def _culprit(graph: Graph, failure: ExecutionFailure) -> Optional[int]:
    """Position in `graph.order` of the op that failed, or None when no single op fails
    alone (the whole graph is then the culprit)."""
    stage = failure.stage
    if stage == LOWER:
        return failure.node_position
    if stage == RUN and failure.lost_buffers:
        # The backend consumed donated inputs before failing (XLA:CPU does): sub-graphs
        # reading them can no longer run, so the search has nothing to run; the whole
        # graph is the culprit.
        return None
    if stage == COMPILE and graph.key in _compile_culprits:
        return _compile_culprits[graph.key]
    position = _search(graph, stage)
    if stage == COMPILE:   # a compile error depends on the graph's structure only
        _compile_culprits.put(graph.key, position)
    return position


def _search(graph: Graph, stage: str) -> Optional[int]:
    """Bisect the topological order for the shortest prefix whose sub-graph fails: its last
    node is the op (an op that fails makes every sub-graph computing it fail)."""
    order = graph.order
    index = positions(graph)
    leaves = {nid: order[p] for nid, p in graph.aliases.items()} if graph.aliases else None

    def fails(k: int) -> bool:
        used = {index[id(i)] for node in order[:k] for i in node.inputs}
        roots = [node for p, node in enumerate(order[:k]) if not is_leaf(node) and p not in used]
        return bool(roots) and _probe_fails(graph.device, roots, leaves, stage)

    if not fails(len(order)):
        return None
    passes, failing = 0, len(order)
    while failing - passes > 1:
        middle = (passes + failing) // 2
        if fails(middle):
            failing = middle
        else:
            passes = middle
    return failing - 1


def _probe_fails(device: int, roots: list, leaves: Optional[dict], stage: str) -> bool:
    """Whether the graph computing `roots` fails to compile (or to run, for a run error),
    donating nothing. Running out of memory is no verdict on the op: a pass."""
    metrics.counter_add("FailedOpProbe")
    sub, _ = collect(device, [(node, None) for node in roots], leaves=leaves)
    try:
        exe = compile_graph(sub, (), "FailedOpProbeTime")
        if stage == RUN:
            jax.block_until_ready(execute(sub, exe))
    except Exception as e:  # noqa: BLE001 - any failure of the probe is the verdict
        return not memory.is_out_of_memory(e)
    return False


def _what_failed(graph: Graph, position: Optional[int], failure: ExecutionFailure) -> str:
    """The first line of the error: the op, the user's line (with provenance on), the stage
    and the original error (the backend's own, under lazyxla's wrapping)."""
    error = failure.error
    original = error.__cause__ if isinstance(error, LoweringError) and error.__cause__ is not None else error
    if position is None:
        what = f"a graph of {len(graph.order)} nodes (no single op in it fails alone)"
    else:
        node = graph.order[position]
        origin = getattr(node, "origin", None)
        if origin:
            what = f"{node.op} (made at {origin})"
        elif STATE.provenance:   # on, yet unstamped: autograd's thread has no user frame
            what = f"{node.op} (made outside your code, e.g. by the backward pass)"
        else:
            what = f"{node.op} (lx.debug.set_provenance(True) records the line that made each op)"
    return f"lazyxla: {what} failed to {failure.stage}: {type(original).__name__}: {original}"
