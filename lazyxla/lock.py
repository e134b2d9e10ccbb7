"""The runtime lock (docs/reliability.md, "Concurrency").

One re-entrant lock for the whole runtime. Every op trace (each
`__torch_dispatch__` call and the device's factory kernels) and every sync
(step barrier, partial sync, host read, donation marks) holds it, so each op
and each sync is atomic with respect to the others: a sync never sees a half
traced op, two threads never intern a signature or register a storage at the
same time, and a buffer is never donated while another thread is building a
node over it. Python tracing is GIL-bound anyway, so serialising it costs
little (an uncontended acquire/release per op); what threads lose is overlap
of one thread's tracing with another's compile, which runs under the lock.

User code may hold it too (`with lazyxla.lock.LOCK:`) to make a sequence of
ops and syncs atomic.
"""
from __future__ import annotations

import os
import threading

from .errors import ForkedRuntimeError
from .state import STATE

LOCK = threading.RLock()


# -- forked children ----------------------------------------------------------------------
# A process forked after JAX's backend started (a DataLoader worker with num_workers > 0,
# multiprocessing's default "fork" on Linux) inherits JAX's state but none of its threads:
# any JAX work in the child hangs for good. The child gets a fresh LOCK (a thread of the
# parent may have held it at the fork) and every lazyxla entry into JAX (uploads, host
# reads, compiles, executions) raises ForkedRuntimeError instead of hanging. A child of a
# parent that never started the backend may use lazyxla normally.

def _after_fork_in_child() -> None:
    LOCK._at_fork_reinit()
    from jax._src import xla_bridge   # lazy: a leaf imports no JAX at import (JAX's private module)
    STATE.forked_runtime = xla_bridge.backends_are_initialized()


def check_not_forked() -> None:
    """Raise ForkedRuntimeError in a child forked after the device runtime started."""
    if STATE.forked_runtime:
        raise ForkedRuntimeError(
            f"lazyxla: process {os.getpid()} was forked from one whose device runtime (JAX) had started, "
            "e.g. a DataLoader worker (num_workers > 0): JAX cannot run in a forked child (it would hang). "
            "Return CPU tensors from the dataset and move them to the device in the main process "
            "(lx.data.DeviceLoader does it in background threads), or create the DataLoader with "
            "multiprocessing_context='spawn'.")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
