"""What every sync entry point does around its graphs: the runtime lock, counted; its
tensors checked and grouped by device; its pending (root, storage) items; its span on
the host timeline.

Every entry point (sync/api.py's barriers and partial syncs, sync/host_read.py's reads,
graph inspection) takes the lock through `runtime_lock`, so `DeviceLockWait` counts
each of them alike.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterable, Iterator

import torch

from .. import metrics
from ..frontend.tensor import LazyTensor
from ..ir.node import DATA
from ..runtime import timeline
from ..state import STATE

# One lock for the whole runtime, also held by every op trace (lazyxla/lock.py,
# docs/reliability.md): syncs never interleave with each other or with tracing.
from ..lock import LOCK


@contextlib.contextmanager
def runtime_lock() -> Iterator[None]:
    """The runtime lock; with lx.metrics' detailed records on (`set_op_records`) its wait
    is recorded as `DeviceLockWait` (upstream's name for a sync's wait for its device)."""
    if not STATE.op_records:
        with LOCK:
            yield
        return
    start = time.perf_counter_ns()
    with LOCK:
        metrics.metric_add("DeviceLockWait", time.perf_counter_ns() - start)
        yield


def pending_items(storages: Iterable) -> list:
    """`(pending value, storage)` for each of `storages` that is not device data."""
    return [(st.value, st) for st in storages if st.value.op is not DATA]


def check_lazy(tensors, what: str) -> list:
    """`tensors` (one or many) as a list of lazy tensors; a clear error for any other."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    out = []
    for t in tensors:
        if not isinstance(t, LazyTensor):
            raise TypeError(f"lazyxla: {what} expects lazyxla tensors, got a "
                            f"{t.device if isinstance(t, torch.Tensor) else type(t).__name__} "
                            f"{'tensor' if isinstance(t, torch.Tensor) else 'value'}; "
                            "move it with t.to(lx.device()) first")
        out.append(t)
    return out


def by_device(tensors: Iterable[LazyTensor]) -> dict:
    """{device: the distinct storages of `tensors` on it}, in first-seen order."""
    groups: dict = {}
    seen: set = set()
    for t in tensors:
        st = t._st
        if id(st) not in seen:
            seen.add(id(st))
            groups.setdefault(st.device, []).append(st)
    return groups


def sync_begins() -> int:
    """A sync point begins: in-place writes from here on start a new epoch (sync/entries.py).
    The host timeline's mark at its start (0 while nothing is recorded)."""
    STATE.sync_epoch += 1
    return timeline.sync_begins(metrics.counter_value("TracedOps") or 0) if timeline.REC.on else 0


def sync_ends(kind: str, started: int, **args) -> None:
    """The sync's span on the host timeline, with the user's line that asked for it."""
    timeline.sync_ends(kind, started, **args, line=timeline.user_line() if started else "")
