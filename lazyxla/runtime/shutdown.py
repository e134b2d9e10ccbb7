"""Interpreter exit with lazyxla work in other threads or in flight (docs/reliability.md).

At exit Python joins non-daemon threads, runs atexit handlers, then finalizes;
a daemon thread that wakes up inside C++ (a JAX call returning, a torch
dispatch) during finalization is unwound by force, and C++ frames that catch
everything abort the process ("FATAL: exception not rethrown"). So, from an
atexit handler that runs before JAX's own:

1. take the runtime lock (bounded wait): an op or sync in progress in another
   thread finishes first. The lock is never released: any other thread that
   enters lazyxla afterwards blocks in a plain lock wait, which finalization
   leaves alone (the process then exits around it);
2. wait for executions in flight, so that no XLA computation runs while the
   backend is torn down;
3. wait (bounded) until threads blocked in `lx.wait_device_ops()` (which waits
   outside the lock) are back in Python, then yield the GIL a few times so that
   threads between a torch binding (which releases the GIL) and our
   `__torch_dispatch__` reach the lock and park.

Limit: a daemon thread running other C++ code at exit (plain CPU torch ops
included) can still abort the process; that is CPython < 3.14 with any C++
extension, not lazyxla, and daemon threads should be joined before exit.

Pending, never-synced work is simply dropped, as with any lazy runtime.
LAZYXLA_EXIT_TIMEOUT (seconds, default 60) bounds steps 1 and 3: exit never
hangs on a thread stuck inside lazyxla.
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
