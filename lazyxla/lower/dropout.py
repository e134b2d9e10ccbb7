"""native_dropout's backward (its forward and the `*_like` random factories are
decompositions onto the seeded random ops: frontend/decompositions.py)."""
from __future__ import annotations

import jax.numpy as jnp
import torch

from .registry import register

aten = torch.ops.aten


@register(aten.native_dropout_backward.default)
def _native_dropout_backward(ctx, grad, mask, scale):
    return jnp.where(mask, grad * jnp.asarray(scale, grad.dtype), jnp.zeros((), grad.dtype))
