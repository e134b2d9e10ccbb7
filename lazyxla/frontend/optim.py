"""torch.optim's multi-tensor ("foreach") path for lazy parameters.

torch.optim picks its foreach implementation by default only for parameters
whose exact type is in `torch.optim.optimizer._foreach_supported_types`
(plain tensors and Parameters) on devices that support foreach kernels (the
PrivateUse1 backend, i.e. lazyxla, is one). Our parameters are `LazyTensor`s,
so we add that type: optimizers then default to foreach on the lazyxla device
(one dispatch per op per parameter group instead of per parameter).
`foreach=False` still selects the per-parameter loop.

Optimizer state (Adam's `exp_avg = zeros_like(p)`, Adagrad's `full_like`) is
created inside the first `step()`. Recorded lazily, step 0's graph then starts
from constant fills where every later step reads the state as parameters: two
graphs to compile during warm-up instead of one (PyTorch/XLA behaves so too).
So while an optimizer step runs, the `*_like`/`new_*` fill factories are
materialised at once (handlers.py `_fill_factory`): W2's AdamW warm-up compiles
1 graph instead of 2. Outside a step they stay lazy, where a constant fused
into the graph is cheaper than an upload every step. The window is tracked with
torch's global optimizer step hooks; a step that raises skips the post hook,
so every step barrier closes the window as well.
"""
from __future__ import annotations

import torch

from .. import patches
from .sync_hooks import optimizer_stepped
from .tensor import LazyTensor


def enable_foreach_default() -> None:
    patches.apply("foreach_lazy_tensor", LazyTensor)


_in_step = [False]


def in_optimizer_step() -> bool:
    return _in_step[0]


def end_optimizer_step(*_hook_args) -> None:
    _in_step[0] = False


def _optimizer_step_done(optimizer, *_hook_args) -> None:
    """Global post hook: close the step window, then let the sync layer end the step
    (an implied step barrier, sync/barriers.py). Under torch.compile this is traced as a
    constant no-op: compiled code places no barrier."""
    _in_step[0] = False
    if not torch.compiler.is_compiling():
        optimizer_stepped(optimizer)


def _begin_optimizer_step(*_hook_args) -> None:
    _in_step[0] = True


def track_optimizer_steps() -> None:
    """Register the global step hooks (patch "optimizer_step_hooks"; once)."""
    patches.apply("optimizer_step_hooks", _begin_optimizer_step, _optimizer_step_done)
