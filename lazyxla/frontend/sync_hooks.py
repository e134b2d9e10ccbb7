"""The two services the tracer needs from the sync layer, installed by it.

A host read (`.item()`, `.cpu()`, a host fallback) must materialise pending
work, the graph-size cap must cut the pending graph, eager mode runs each
op's graph at once, and the end of an optimizer step may be a step barrier;
all are sync-layer work. The frontend sits below sync (LAYOUT.md), so instead of importing it
the frontend calls these slots, which `sync/api.py` fills when it is imported
(`import lazyxla` always imports it before any tensor exists).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

_host_values: Optional[Callable[..., list]] = None
_cut_graphs: Optional[Callable[[], None]] = None
_eager_run: Optional[Callable[[list], None]] = None
_optimizer_stepped: Optional[Callable[[object], None]] = None
_scaler_updated: Optional[Callable[[], None]] = None


def install(host_values_fn: Callable[..., list], cut_graphs_fn: Callable[[], None],
            eager_run_fn: Callable[[list], None], optimizer_stepped_fn: Callable[[object], None],
            scaler_updated_fn: Callable[[], None]) -> None:
    global _host_values, _cut_graphs, _eager_run, _optimizer_stepped, _scaler_updated
    _host_values, _cut_graphs, _eager_run = host_values_fn, cut_graphs_fn, eager_run_fn
    _optimizer_stepped, _scaler_updated = optimizer_stepped_fn, scaler_updated_fn


def _missing() -> RuntimeError:
    return RuntimeError("lazyxla: the sync layer is not initialised; import lazyxla first")


def host_values(tensors: list, allow_explicit: bool = True) -> list[torch.Tensor]:
    """CPU copies of lazy `tensors` (sync/api.py `host_values`)."""
    if _host_values is None:
        raise _missing()
    return _host_values(tensors, allow_explicit)


def host_value(t) -> torch.Tensor:
    return host_values([t])[0]


def cut_graphs() -> None:
    """Materialise all pending work because the graph-size cap was reached."""
    if _cut_graphs is None:
        raise _missing()
    _cut_graphs()


def optimizer_stepped(optimizer) -> None:
    """An optimizer step just ended: the sync layer may place an implied step barrier
    (sync/barriers.py)."""
    if _optimizer_stepped is None:
        raise _missing()
    _optimizer_stepped(optimizer)


def scaler_updated() -> None:
    """GradScaler's scale update was traced: a deferred implied barrier may run now."""
    if _scaler_updated is None:
        raise _missing()
    _scaler_updated()


def eager_run(storages: list) -> None:
    """Run the pending work of `storages` now, as eager mode does after each op
    (sync/api.py `eager_run`)."""
    if _eager_run is None:
        raise _missing()
    _eager_run(storages)
