"""`ExecuteReadyTime`: how long a graph really ran, from its launch until its outputs are ready.

Launching a compiled graph returns at once (JAX executes asynchronously), so the
`ExecuteTime` metric only times the launch. The run itself ends when the outputs are
ready, and nothing on the step loop's path waits for that: blocking there would
serialise tracing of the next step with the device's work, the overlap that makes
lazy execution fast. JAX offers no completion callback, so one waiter thread does
the waiting: `watch()` hands it the launch time and the output arrays (a deque append
and a condition notify, about a microsecond per graph), it blocks in
`jax.block_until_ready` with the GIL released, and records the sample when the arrays
are ready. Alternatives measured against this: timing at the next host read only
bounds the run from above (it includes the host's own time in between), and a
blocking wait after each launch costs the overlap.

Reads of the metrics (`lx.metrics.*`) first wait until every launched graph has been
measured (`settle`), so a read after a host read or `wait_device_ops()` sees them all.

An output donated to a later graph before the waiter reached it can no longer be
waited on; the waiter then waits on the outputs that are left and, if none is, takes
the moment it noticed: later than the real end by at most the time the waiter
needed to be scheduled.
"""
from __future__ import annotations

import collections
import threading
import time

import jax

from .. import metrics
from . import shutdown

METRIC = "ExecuteReadyTime"

class _Waiter:
    """The launches handed over and the thread that waits for them."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.queue: collections.deque = collections.deque()
        self.unmeasured = 0            # launches handed over and not recorded yet
        self.thread = None


_WAITER = _Waiter()


def watch(start_ns: int, outs) -> None:
    """Record `METRIC` for a graph launched at `start_ns` once `outs` are ready."""
    w = _WAITER
    with w.cv:
        w.queue.append((start_ns, outs))
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
            start_ns, outs = w.queue.popleft()
        with shutdown.waiting_thread():   # the exit handler lets this wait return first
            _wait_ready(outs)
        elapsed = time.perf_counter_ns() - start_ns
        del outs
        metrics.metric_add(METRIC, elapsed)
        with w.cv:
            w.unmeasured -= 1
            w.cv.notify_all()


metrics.before_read.append(settle)
