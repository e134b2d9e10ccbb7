"""torch.optim's multi-tensor ("foreach") path for lazy parameters, and eager optimizer state.

`LazyTensor` is added to `torch.optim.optimizer._foreach_supported_types`, so optimizers
default to foreach on the lazyxla device (one dispatch per op per parameter group instead
of per parameter); `foreach=False` still selects the per-parameter loop. It is added to
`torch.utils._foreach_utils`' list too, so `clip_grad_norm_` (the Trainer's, every step)
takes `_foreach_norm` and `_foreach_mul_` instead of two ops per parameter. While an
optimizer step runs, the `*_like`/`new_*` fill factories are materialised at once
(handlers.py `_fill_factory`), so optimizer state created in the first `step()` is device
data as in every later step; outside a step they stay lazy. torch's global optimizer step
hooks open and close that window, and every step barrier closes it too.

Design: docs/design.md, "Warm-up: optimizer state" and "frontend/optim.py".
"""
from __future__ import annotations

import torch

from .. import patches
from ..state import STATE
from .sync_hooks import optimizer_stepped
from .tensor import LazyTensor


def enable_foreach_default() -> None:
    patches.apply("foreach_lazy_tensor", LazyTensor)



def in_optimizer_step() -> bool:
    return STATE.in_optimizer_step


def end_optimizer_step(*_hook_args) -> None:
    STATE.in_optimizer_step = False


def _optimizer_step_done(optimizer, *_hook_args) -> None:
    """Global post hook: close the step window, then let the sync layer end the step
    (an implied step barrier, sync/barriers.py). Under torch.compile this is traced as a
    constant no-op; the compiled step's graph ends the step instead (dynamo/replay.py)."""
    STATE.in_optimizer_step = False
    if not torch.compiler.is_compiling():
        optimizer_stepped(optimizer)


def _begin_optimizer_step(*_hook_args) -> None:
    STATE.in_optimizer_step = True


def track_optimizer_steps() -> None:
    """Register the global step hooks (patch "optimizer_step_hooks"; once)."""
    patches.apply("optimizer_step_hooks", _begin_optimizer_step, _optimizer_step_done)
