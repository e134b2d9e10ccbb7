"""Interpreter exit with lazyxla work in other threads or in flight (docs/reliability.md).

From an atexit handler that runs before JAX's own: (1) take the runtime lock (bounded
wait) and never release it, so an op or sync in another thread finishes first and later
entrants park in a plain lock wait; (2) wait for executions in flight; (3) wait (bounded)
for threads in a device wait outside the lock (`waiting_thread`) to return to Python.
Pending, never-synced work is dropped. LAZYXLA_EXIT_TIMEOUT (seconds, default 60) bounds
steps 1 and 3.

Design: docs/design.md, "runtime/shutdown.py".
"""
from __future__ import annotations

import atexit
import contextlib
import threading
import time
from typing import Callable, Iterator

from .. import config
from ..lock import LOCK

# idents of threads blocked in a device wait outside the lock (`waiting_thread`)
waiting: set = set()
# what waits for executions in flight (runtime/execute.py's wait_all, installed there:
# execute imports this module, not the other way round)
_drains: list[Callable[[], None]] = []


def drain_at_exit(wait: Callable[[], None]) -> None:
    """Call `wait` at exit, after taking the lock (step 2 above)."""
    _drains.append(wait)


@contextlib.contextmanager
def waiting_thread() -> Iterator[None]:
    """Around a wait for the device outside the lock: the exit handler lets it return first."""
    me = threading.get_ident()
    waiting.add(me)
    try:
        yield
    finally:
        waiting.discard(me)


def quiesce(timeout: float | None = None) -> None:
    if timeout is None:
        timeout = config.SETTINGS.exit_timeout   # LAZYXLA_EXIT_TIMEOUT
    deadline = time.monotonic() + timeout
    if not LOCK.acquire(timeout=timeout):
        return  # another thread is stuck holding the lock: exit anyway rather than hang
    for wait in _drains:
        try:
            wait()
        except Exception:  # noqa: BLE001  (a failed execution has nothing left to wait for)
            pass
    while waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    # Give threads caught between a torch binding (which releases the GIL) and our
    # __torch_dispatch__ the chance to run up to the lock and park there.
    if threading.active_count() > 1:
        for _ in range(20):
            time.sleep(0.002)


atexit.register(quiesce)
