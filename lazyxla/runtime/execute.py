"""Running a compiled graph.

Execution is asynchronous: JAX returns futures immediately, only host reads
and `wait_all` block (each such wait counts `DeviceWait`, as does transfer.download). Donated parameters are marked dead with the graph key that consumed them;
the output arrays go back to sync/, which installs them (sync/install.py).
"""
from __future__ import annotations

import time
from typing import Protocol

import jax

from .. import metrics
from ..errors import ExecutionFailure
from .._jax import jax_devices
from ..state import STATE
from ..ir.scalars import scalar_args
from ..lock import LOCK, check_not_forked
from ..patches import x64
from ..ir.graph import Graph
from . import device_waits, memory, placement, ready_times, timeline, transfer
from .device_data import mark_all_donated

_in_flight: list = []   # per execution not yet seen finished: one of its output arrays
_PRUNE_AT = 8            # executions a pipelined loop keeps in flight before they are checked


class Runnable(Protocol):
    """What execution needs of a compiled graph (compile.cache.Executable, which sits
    above the runtime, is one)."""
    key_hex: str
    donors: tuple

    def call(self, *args): ...

    def memory_analysis(self) -> dict: ...


def execute(graph: Graph, exe: Runnable, eager: bool = False) -> tuple:
    """Run `exe` on `graph`'s parameters; mark the donated ones dead; return all output
    arrays (sync/install.py makes them tensors' values). A failed call raises
    `ExecutionFailure` (stage "run") with the donated buffers it lost.

    `ExecuteTime` times the launch (`EagerOpExecuteTime` for an eager op's graph). With
    lx.metrics' detailed records on (`set_op_records`), a step's graph also records
    `UnwrapXlaData` (gathering the parameters' buffers) and, off the step loop's path, `ExecuteReadyTime` (launch
    until the outputs are ready, runtime/ready_times.py); they cost about 25 us per
    graph (a tiny step: 110 -> 135 us), so they are not always on."""
    if graph.scalars:   # sent with this run: lazyxla keeps no device copies of them
        metrics.counter_add("UploadedScalars", len(graph.scalars))
    return execute_params(exe, graph.params, scalar_args(graph), graph.device, _devices(graph), eager)


@x64
def execute_params(exe: Runnable, params: list, scalars: list, device: int, devices: tuple,
                   eager: bool = False) -> tuple:
    """`execute` from its parts: the parameters' handles in the executable's order, the
    scalar operands' arrays, the graph's device and the local devices it runs on. A
    captured step (sync/step_capture.py) calls it with parameters gathered in one pass."""
    check_not_forked()
    detailed = STATE.op_records and not eager
    if detailed:
        start = time.perf_counter_ns()
    args = _param_args(params, exe.donors, device)
    if detailed:
        metrics.metric_add("UnwrapXlaData", time.perf_counter_ns() - start)
    args += scalars
    analysis = exe.memory_analysis()
    memory.check_fits(devices, analysis, exe.key_hex)
    memory.note_execution(devices, memory.execution_extra(analysis))
    start = time.perf_counter_ns()
    try:
        outs = exe.call(*args)
    except Exception as e:
        # Nothing has been installed or marked yet, so every tensor keeps its value or
        # pending computation. Only a backend that consumed donated inputs before
        # failing loses data: mark those buffers dead so that using them raises
        # DonatedBufferError instead of a backend error on a deleted array.
        lost = [params[i] for i in exe.donors
                if params[i].array is not None and params[i].array.is_deleted()]
        for data in lost:
            data.mark_donated(exe.key_hex + " (failed execution)")
        raise ExecutionFailure(ExecutionFailure.RUN, e, lost_buffers=len(lost)) from e
    metrics.metric_add("EagerOpExecuteTime" if eager else "ExecuteTime", time.perf_counter_ns() - start)
    if timeline.REC.on:
        timeline.mark("dispatch", start, graph=exe.key_hex, arguments=len(args))
    if detailed or timeline.REC.on:
        ready_times.watch(start, outs, metric=detailed, label=f"graph {exe.key_hex}" if timeline.REC.on else "")
    metrics.counter_add("ExecuteComputation")
    if exe.donors:
        metrics.metric_add("DonatedBytes", mark_all_donated([params[i] for i in exe.donors], exe.key_hex))
    if outs:
        _note_in_flight(outs[0])
    return outs


def _note_in_flight(witness: jax.Array) -> None:
    """Keep one output of an execution until it is seen finished, so that `wait_all` can
    wait for the execution even after the program dropped all its tensors. Weak references
    to the outputs could not: the exit handler then missed an execution still running, and
    XLA:CPU's worker threads ran it while the process tore down (a segfault at exit). The
    first output is kept: in a training step the first parameter's update (sync/collect.py
    orders updates first), which its tensor holds anyway and the next step donates, so a
    loop holds no array it would not hold without this (a loss, the last output, would be
    one more live array per step in flight). It is kept until a later execution finds it
    ready or donated (`is_ready` is asked of a few at a time, never of a deleted array,
    which it does not survive), or a wait takes it."""
    _in_flight.append(witness)
    if len(_in_flight) > _PRUNE_AT:
        _in_flight[:] = [a for a in _in_flight if not (a.is_deleted() or a.is_ready())]


def _param_args(params: list, donors: tuple, device: int) -> list:
    """The executable's arguments for `params`. A staged value (a value the host computed,
    sync/host_split.py) that the graph does not donate is passed as its host array: the
    call moves it with the launch (JAX CPU: about 14 us for five small arrays against
    120 us for a `device_put` of them first), and the handle stays staged, its host array
    never changing (transfer.staged), so a later graph passes it again. A donated staged
    value is placed first (transfer.place_staged): its buffer must be the device's own,
    for `mark_donated` to consume and for XLA to never write into host memory."""
    if all([d.host is None for d in params]):   # every buffer placed: `array` would only return `_array`
        return [d._array for d in params]
    staged = [i for i, d in enumerate(params) if d.host is not None and d.sharding is None]
    if not staged:
        return [d.array for d in params]
    donated = [params[i] for i in staged if i in donors]
    if donated:
        transfer.place_staged(donated, device)
    return [d.host if d.host is not None and d.sharding is None else d.array for d in params]


def _devices(graph: Graph) -> tuple:
    """Local device indices the graph runs on (all of them in SPMD mode)."""
    if placement.spmd_enabled():
        return tuple(range(len(jax_devices())))
    return (graph.device,)


def wait_all() -> None:
    """Block until every execution scheduled so far has finished."""
    with LOCK:  # executes append under the lock: take and clear the list atomically
        pending = list(_in_flight)
        _in_flight.clear()
    live = [a for a in pending if not a.is_deleted()]   # a donated one: its consumer is waited
    if live:
        metrics.counter_add("DeviceWait")
        with device_waits.waiting_thread():   # the exit handler lets this wait return first
            jax.block_until_ready(live)

