"""`ExecuteReadyTime`: how long a graph really ran, from its launch until its outputs are ready;
and the host timeline's device track (runtime/timeline.py), measured the same way.

`watch()` hands one waiter thread a graph's launch time and output arrays (about a
microsecond); the waiter blocks in `jax.block_until_ready` with the GIL released and
records the sample. Reads of the metrics first wait until every launched graph has been
measured (`settle`). An output donated to a later graph before the waiter reached it is
skipped; with none left the sample ends when the waiter noticed.

Design: docs/design.md, "runtime/ready_times.py".
"""
from __future__ import annotations

import collections
import threading
import time

import jax

from .. import metrics
from . import device_waits, timeline

METRIC = "ExecuteReadyTime"

class _Waiter:
    """The launches handed over and the thread that waits for them."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.queue: collections.deque = collections.deque()
        self.unmeasured = 0            # launches handed over and not recorded yet
        self.thread = None


_WAITER = _Waiter()


def watch(start_ns: int, outs, metric: bool = True, label: str = "") -> None:
    """Once `outs` are ready, record `METRIC` (if `metric`) and, while the host timeline
    records, a device span `label` for a graph launched at `start_ns`."""
    w = _WAITER
    with w.cv:
        w.queue.append((start_ns, outs, metric, label))
        w.unmeasured += 1
        if w.thread is None:
            w.thread = threading.Thread(target=_wait_loop, name="lazyxla-ready-times", daemon=True)
            w.thread.start()
        w.cv.notify_all()


def settle(timeout: float = 60.0) -> None:
    """Wait until every graph handed to `watch` has been measured (bounded)."""
    w = _WAITER
    if not w.unmeasured or threading.current_thread() is w.thread:
        return
    deadline = time.monotonic() + timeout
    with w.cv:
        while w.unmeasured and time.monotonic() < deadline:
            w.cv.wait(0.05)


def _wait_ready(outs) -> None:
    for array in outs:
        try:
            if not array.is_deleted():
                array.block_until_ready()
        except Exception:  # noqa: BLE001  (donated meanwhile, or a failed run: nothing to wait for)
            pass


def _wait_loop() -> None:
    w = _WAITER
    while True:
        with w.cv:
            while not w.queue:
                w.cv.wait()
            start_ns, outs, metric, label = w.queue.popleft()
        with device_waits.waiting_thread():   # the exit handler lets this wait return first
            _wait_ready(outs)
        ready = time.perf_counter_ns()
        del outs
        if metric:
            metrics.metric_add(METRIC, ready - start_ns)
        if label:
            timeline.span(label, start_ns, ready, timeline.DEVICE)
        with w.cv:
            w.unmeasured -= 1
            w.cv.notify_all()


metrics.before_read.append(settle)
