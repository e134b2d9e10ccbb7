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

import threading

LOCK = threading.RLock()
