"""The few `prims.*` ops that PyTorch's decompositions emit (e.g. for layer
norm or cat), so a decomposed op stays on the device."""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import norm_dims, opmath
from .registry import register

prims = torch.ops.prims


@register(prims.broadcast_in_dim.default)
def _broadcast_in_dim(ctx, x, shape, broadcast_dimensions):
    return lax.broadcast_in_dim(x, tuple(shape), tuple(broadcast_dimensions))


@register(prims.convert_element_type.default)
def _convert(ctx, x, dtype):
    return x.astype(ctx.jdtype)


@register(prims.sum.default)
def _sum(ctx, x, dims, *, output_dtype=None):
    return jnp.sum(x.astype(opmath(ctx.jdtype)), axis=norm_dims(dims, x.ndim))


@register(prims.var.default)
def _var(ctx, x, dims, correction=1, *, output_dtype=None):
    return jnp.var(x.astype(opmath(ctx.jdtype)), axis=norm_dims(dims, x.ndim), ddof=correction)


@register(prims.div.default)
def _div(ctx, x, y):
    x, y = jnp.asarray(x).astype(ctx.jdtype), jnp.asarray(y).astype(ctx.jdtype)
    if jnp.issubdtype(ctx.jdtype, jnp.integer):
        return lax.div(x, y)
    return x / y


@register(prims.cat.default)
def _cat(ctx, tensors, dim):
    return jnp.concatenate([t.astype(ctx.jdtype) for t in tensors], axis=dim)
