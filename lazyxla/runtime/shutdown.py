"""Interpreter exit with lazyxla work in other threads or in flight (docs/reliability.md).

From an atexit handler that runs before JAX's own (`install`, called by lazyxla/__init__.py):
(1) take the runtime lock (bounded wait) and never release it, so an op or sync in another
thread finishes first and later entrants park in a plain lock wait; (2) wait for executions
in flight (runtime/execute.py `wait_all`); (3) wait (bounded) for threads in a device wait
outside the lock (runtime/device_waits.py) to return to Python.
Pending, never-synced work is dropped. LAZYXLA_EXIT_TIMEOUT (seconds, default 60) bounds
steps 1 and 3.

Design: docs/design.md, "runtime/shutdown.py".
"""
from __future__ import annotations

import atexit
import threading
import time

from .. import config
from ..lock import LOCK
from .device_waits import waiting
from .execute import wait_all


def quiesce(timeout: float | None = None) -> None:
    if timeout is None:
        timeout = config.SETTINGS.exit_timeout   # LAZYXLA_EXIT_TIMEOUT
    deadline = time.monotonic() + timeout
    if not LOCK.acquire(timeout=timeout):
        return  # another thread is stuck holding the lock: exit anyway rather than hang
    try:
        wait_all()
    except Exception:  # noqa: BLE001  (a failed execution has nothing left to wait for)
        pass
    while waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    # Give threads caught between a torch binding (which releases the GIL) and our
    # __torch_dispatch__ the chance to run up to the lock and park there.
    if threading.active_count() > 1:
        for _ in range(20):
            time.sleep(0.002)



def install() -> None:
    """Register the exit handler (once, early in `import lazyxla`: atexit runs handlers last
    registered first, so it runs after the ones lazyxla's modules register later, data/'s)."""
    atexit.register(quiesce)
