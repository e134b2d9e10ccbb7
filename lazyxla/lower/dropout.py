"""Dropout and the `*_like` random factories, as lazyxla decompositions onto the
seeded random ops of random.py (PyTorch's native_dropout decomposition calls
rand_like, which has no lowering and would draw on the host every step)."""
from __future__ import annotations

import jax.numpy as jnp
import torch

from .registry import register, register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.native_dropout.default)
def _native_dropout(x, p, train):
    # ATen treats train=None as training
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    keep = aten.bernoulli.p(x, 1.0 - p)        # 0/1 in x's dtype, one seeded node
    out = aten.mul.Tensor(x, keep)
    mask = aten.ne.Scalar(keep, 0)
    return aten.mul.Scalar(out, 1.0 / (1.0 - p)), mask


@register(aten.native_dropout_backward.default)
def _native_dropout_backward(ctx, grad, mask, scale):
    return jnp.where(mask, grad * jnp.asarray(scale, grad.dtype), jnp.zeros((), grad.dtype))


def _like(x, kwargs):
    kw = {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
    return torch.empty_like(x, **kw)


@register_decomposition(aten.rand_like.default)
def _rand_like(x, **kwargs):
    return _like(x, kwargs).uniform_()


@register_decomposition(aten.randn_like.default)
def _randn_like(x, **kwargs):
    return _like(x, kwargs).normal_()
