"""Python's cyclic garbage collector, kept out of the training step.

A lazy step allocates thousands of container objects (IR nodes, tensor wrappers, argument
tuples), so the collector's generation 0 runs several times a step, and every few dozen
steps a generation-2 collection walks every object of torch, JAX and the model. Once the
program is past its warm-up, at a step barrier, the managed collector:
* collects everything once, then freezes what is left (`gc.freeze()`: the model, the
  modules, compiled executables), so later collections never walk it again;
* raises the automatic generation-0 threshold to `young_threshold` allocations, so a step
  runs without automatic collections (they still come for programs without barriers);
* collects generation 0 at a step barrier that follows at least `young_minimum` allocations
  (not one right after another), once the barrier's graphs ran: the step's temporaries and
  its pending IR are gone then and few young objects are alive, so cycles a program makes
  are still freed every step;
* collects generation 1 every `older_every` barriers.
`LAZYXLA_GC_MANAGEMENT=0`, or a program that disabled the collector itself, leaves it alone;
turning the setting off later restores the thresholds and unfreezes. Collections, theirs
or ours, are counted (`GcCollections`, `GcCollectionsGen2`) and timed (`GcTime`, recorded at
the next step barrier or `flush()`: a collection can start inside metrics' own lock) by a
hook in `gc.callbacks` that the backend installs at the first device use (`watch`; nothing
happens at import) and `unwatch` removes.
"""
from __future__ import annotations

import dataclasses
import gc
import time

from .. import config, metrics
from . import timeline


@dataclasses.dataclass(frozen=True)
class CollectorPolicy:
    warmup_barriers: int = 3       # barriers before management starts (first compiles done)
    young_threshold: int = 100_000  # allocations between automatic generation-0 collections
    older_every: int = 100         # barriers between explicit generation-1 collections
    young_minimum: int = 2_000      # allocations since the last collection for one at a barrier


class _State:
    barriers = 0
    managed = False
    saved_thresholds: tuple = ()
    started_ns = 0
    durations: list = []   # ns of collections not yet recorded in GcTime


_STATE = _State()


def young() -> int:
    """The young generation's count (allocations less deallocations since its last
    collection), read when a step barrier begins: its `after_barrier` decides by it."""
    return gc.get_count()[0]


def after_barrier(policy, young_count: int) -> None:
    """At the end of a step barrier: start managing after the warm-up, then collect the
    young when `young_count` (`young()` at the barrier's start) says the step made enough."""
    state = _STATE
    flush()
    if policy is None or not config.SETTINGS.gc_management:
        if state.managed:
            release()
        return
    state.barriers += 1
    if not state.managed:
        if state.barriers < policy.warmup_barriers or not gc.isenabled():
            return
        state.saved_thresholds = gc.get_threshold()
        # garbage alive now would be frozen for good, device buffers and all (a model left in
        # a cycle by an earlier run, the warm-up's own): one full collection first
        gc.collect()
        gc.freeze()
        gc.set_threshold(policy.young_threshold, *state.saved_thresholds[1:])
        state.managed = True
    if state.barriers % policy.older_every == 0:
        gc.collect(1)
    elif young_count >= policy.young_minimum:
        gc.collect(0)


def release() -> None:
    """Stop managing: the thresholds as they were, frozen objects collectable again."""
    state = _STATE
    if state.managed:
        gc.set_threshold(*state.saved_thresholds)
        gc.unfreeze()
        state.managed = False
    state.barriers = 0


def is_managed() -> bool:
    return _STATE.managed


def every_object() -> list:
    """Every object the collector tracks, frozen ones included: `gc.get_objects()` skips
    what `gc.freeze()` set aside (the model and optimizer, once managed). For debug walks
    (the memory report): a full collection, then what is alive is frozen again, so a cycle
    among today's young objects that dies later is never collected: not for a step's hot path."""
    if not _STATE.managed:
        return gc.get_objects()
    gc.unfreeze()
    try:
        gc.collect()   # what died since the freeze: not listed, and not frozen again
        return gc.get_objects()
    finally:
        gc.freeze()


def flush() -> None:
    """Record the collections' times seen since the last flush in `GcTime`."""
    durations, _STATE.durations = _STATE.durations, []
    for ns in durations:
        metrics.metric_add("GcTime", ns)


def _count(phase: str, info: dict) -> None:
    # no lock may be taken here: the collection may have started while one was held
    if phase == "start":
        _STATE.started_ns = time.perf_counter_ns()
        return
    metrics.counter_add("GcCollections")
    if info["generation"] == 2:
        metrics.counter_add("GcCollectionsGen2")
    ended = time.perf_counter_ns()
    if len(_STATE.durations) < 4096:   # a program without barriers keeps only the first ones
        _STATE.durations.append(ended - _STATE.started_ns)
    timeline.span(f"gc generation {info['generation']}", _STATE.started_ns, ended, timeline.COLLECTOR,
                  collected=info["collected"])


def watch() -> None:
    """Count and time every collection from now on (the backend's start; once)."""
    if _count not in gc.callbacks:
        gc.callbacks.append(_count)


def unwatch() -> None:
    """Stop counting collections: the hook leaves `gc.callbacks`."""
    if _count in gc.callbacks:
        gc.callbacks.remove(_count)
