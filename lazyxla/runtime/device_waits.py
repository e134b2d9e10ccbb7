"""Threads blocked in a device wait outside the runtime lock.

The exit handler (runtime/shutdown.py) lets them return to Python before JAX tears its
backend down; execution (runtime/execute.py `wait_all`) and the ready-time watcher
(runtime/ready_times.py) mark their waits here. A module of its own so that shutdown can
import execute's `wait_all` directly while execute imports what marks a wait.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

# idents of threads blocked in a device wait outside the lock (`waiting_thread`)
waiting: set = set()


@contextlib.contextmanager
def waiting_thread() -> Iterator[None]:
    """Around a wait for the device outside the lock: the exit handler lets it return first."""
    me = threading.get_ident()
    waiting.add(me)
    try:
        yield
    finally:
        waiting.discard(me)
