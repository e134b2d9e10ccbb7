"""Activation checkpointing that saves memory on lazyxla (torch.utils.checkpoint, lx.utils.checkpoint).

`torch.utils.checkpoint.checkpoint` is replaced at import (the patch "torch_checkpoint" of
lazyxla/patches). With lazyxla tensors among the arguments, PyTorch's own checkpoint runs
(either mode, RNG state, `context_fn`, determinism checks unchanged) on the region wrapped
so that its re-run in the backward first passes its inputs, together with the gradients
flowing into the region, through an optimization barrier; XLA can then neither merge the
re-run with the forward nor hoist it into the forward. Other calls go to PyTorch's
function untouched. Code that bound the function before lazyxla was imported (`from
torch.utils.checkpoint import checkpoint`) keeps PyTorch's and saves no memory;
`lx.utils.checkpoint` always works.

Design: docs/design.md, "recompute.py".
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch
import torch.utils.checkpoint as _torch_checkpoint
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import patches
from .frontend.barrier import optimization_barrier_
from .frontend.tensor import LazyTensor

_ORIGINAL: Callable = _torch_checkpoint.checkpoint


class _GradBox:
    """The gradients that reached a checkpointed region's outputs in the backward."""
    __slots__ = ("grads",)

    def __init__(self) -> None:
        self.grads: Optional[list] = None


class _TapGrads(torch.autograd.Function):
    """Identity on the region's outputs; its backward records the incoming gradients."""

    @staticmethod
    def forward(ctx, box: _GradBox, *outputs):
        ctx.box = box
        return tuple(o.clone() for o in outputs)   # new tensors: in-place use stays legal

    @staticmethod
    def backward(ctx, *grads):
        ctx.box.grads = [g for g in grads if isinstance(g, LazyTensor)]
        return (None, *grads)


class _BarrierAfterGrads(torch.autograd.Function):
    """The re-run's inputs, tied by one optimization barrier to the gradients; identity
    for autograd."""

    @staticmethod
    def forward(ctx, n: int, *tensors):
        inputs, grads = tensors[:n], tensors[n:]
        outs = [t.clone() for t in inputs]
        optimization_barrier_(outs + [g.clone() for g in grads])
        ctx.mark_non_differentiable(*(o for o, t in zip(outs, inputs) if not t.requires_grad))
        ctx.n_grads = len(grads)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None, *grads, *([None] * ctx.n_grads))


def _barrier_inputs(args: tuple, kwargs: dict, grads: list) -> tuple[tuple, dict]:
    leaves, spec = tree_flatten((args, kwargs))
    where = [i for i, v in enumerate(leaves) if isinstance(v, LazyTensor)]
    if where:
        fenced = _BarrierAfterGrads.apply(len(where), *(leaves[i] for i in where), *grads)
        for i, t in zip(where, fenced):
            leaves[i] = t
    return tree_unflatten(leaves, spec)


def _has_lazy(args: tuple, kwargs: dict) -> bool:
    return any(isinstance(v, LazyTensor) for v in tree_flatten((args, kwargs))[0])


def _lazyxla_checkpoint(checkpoint_fn: Callable, function: Callable, args: tuple, kwargs: dict) -> Any:
    box = _GradBox()

    @functools.wraps(function)
    def region(*a, **kw):
        if box.grads is not None:     # the backward's re-run
            grads, box.grads = box.grads, None   # held no longer than needed
            a, kw = _barrier_inputs(a, kw, grads)
        return function(*a, **kw)

    out = checkpoint_fn(region, *args, **kwargs)
    leaves, spec = tree_flatten(out)
    where = [i for i, v in enumerate(leaves) if isinstance(v, LazyTensor) and v.requires_grad]
    if not where:
        return out
    tapped = _TapGrads.apply(box, *(leaves[i] for i in where))
    for i, t in zip(where, tapped):
        leaves[i] = t
    return tree_unflatten(leaves, spec)


@functools.wraps(_ORIGINAL)
def checkpoint(function: Callable, *args, **kwargs) -> Any:
    """`torch.utils.checkpoint.checkpoint`, with the re-run kept apart from the forward
    when lazyxla tensors are among the arguments (see the module docstring)."""
    if torch.compiler.is_compiling() or not _has_lazy(args, kwargs):
        return _ORIGINAL(function, *args, **kwargs)
    return _lazyxla_checkpoint(_ORIGINAL, function, args, kwargs)


def patch_torch_checkpoint() -> None:
    """Make `torch.utils.checkpoint.checkpoint` the lazyxla-aware function (idempotent;
    the patch "torch_checkpoint" of lazyxla/patches, which can undo it)."""
    patches.apply("torch_checkpoint", checkpoint)
