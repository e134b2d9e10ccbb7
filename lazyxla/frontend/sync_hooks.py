"""The five services the tracer needs from the sync layer, installed by it.

A host read (`.item()`, `.cpu()`, a host fallback) must materialise pending
work, the graph-size cap must cut the pending graph, eager mode runs each
op's graph at once, and the end of an optimizer step (or of GradScaler's update)
may be a step barrier; all are sync-layer work. The frontend sits below sync
(docs/layers.md), so instead of importing it the frontend calls these slots: an
import-time seam that `sync/api.py` fills when it is imported (`import lazyxla` always
imports it before any tensor exists).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

class _Services:
    """The sync layer's functions, once installed (None before)."""
    host_values: Optional[Callable[..., list]] = None
    cut_graphs: Optional[Callable[[], None]] = None
    eager_run: Optional[Callable[[list], None]] = None
    optimizer_stepped: Optional[Callable[[object], None]] = None
    scaler_updated: Optional[Callable[[], None]] = None


_SYNC = _Services()


def install(host_values_fn: Callable[..., list], cut_graphs_fn: Callable[[], None],
            eager_run_fn: Callable[[list], None], optimizer_stepped_fn: Callable[[object], None],
            scaler_updated_fn: Callable[[], None]) -> None:
    _SYNC.host_values, _SYNC.cut_graphs, _SYNC.eager_run = host_values_fn, cut_graphs_fn, eager_run_fn
    _SYNC.optimizer_stepped, _SYNC.scaler_updated = optimizer_stepped_fn, scaler_updated_fn


def _missing() -> RuntimeError:
    return RuntimeError("lazyxla: the sync layer is not initialised; import lazyxla first")


def _service(name: str) -> Callable:
    fn = getattr(_SYNC, name)
    if fn is None:
        raise _missing()
    return fn


def host_values(tensors: list, allow_explicit: bool = True) -> list[torch.Tensor]:
    """CPU copies of lazy `tensors` (sync/host_read.py `host_values`)."""
    return _service("host_values")(tensors, allow_explicit)


def host_value(t) -> torch.Tensor:
    return host_values([t])[0]


def cut_graphs() -> None:
    """Materialise all pending work because the graph-size cap was reached."""
    _service("cut_graphs")()


def optimizer_stepped(optimizer) -> None:
    """An optimizer step just ended: the sync layer may place an implied step barrier
    (sync/barriers.py)."""
    _service("optimizer_stepped")(optimizer)


def scaler_updated() -> None:
    """GradScaler's scale update was traced: a deferred implied barrier may run now."""
    _service("scaler_updated")()


def eager_run(storages: list) -> None:
    """Run the pending work of `storages` now, as eager mode does after each op
    (sync/api.py `eager_run`)."""
    _service("eager_run")(storages)
