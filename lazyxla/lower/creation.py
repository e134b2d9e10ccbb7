"""Factories, fills, copies and dtype conversion.

Factories without a tensor argument (torch.zeros/ones/full(..., device=dev))
never reach these rules: PyTorch builds them from `empty` (our PrivateUse1
kernel, a zeros node) and an in-place fill; only the `*_like`/`new_*` forms,
called on a lazy tensor, are recorded as such."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch

from ._util import cast, exact_div
from .registry import register

aten = torch.ops.aten


@register(aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default,
          aten.zeros_like.default, aten.new_zeros.default, aten.zero.default, aten.zeros.default)
def _zeros(ctx, *args, **kwargs):
    return jnp.zeros(ctx.shape, ctx.jdtype)


@register(aten.ones_like.default, aten.new_ones.default)
def _ones(ctx, *args, **kwargs):
    return jnp.ones(ctx.shape, ctx.jdtype)


@register(aten.full_like.default)
def _full_like(ctx, x, fill_value, **kwargs):
    return jnp.full(ctx.shape, fill_value, ctx.jdtype)


@register(aten.new_full.default)
def _new_full(ctx, x, size, fill_value, **kwargs):
    return jnp.full(ctx.shape, fill_value, ctx.jdtype)


@register(aten.fill.Scalar, aten.fill.Tensor)
def _fill(ctx, x, value):
    return jnp.full(ctx.shape, value, ctx.jdtype)


@register(aten._to_copy.default)
def _to_copy(ctx, x, **kwargs):
    if jnp.iscomplexobj(x) and not jnp.issubdtype(ctx.jdtype, jnp.complexfloating):
        if ctx.dtype == torch.bool:
            return x != 0     # true where either part is non-zero
        x = jnp.real(x)       # eager drops the imaginary part (with a warning); JAX will refuse the cast
    return cast(x, ctx.jdtype)   # complex64 <-> complex128 part by part, as the TPU needs


@register(aten.arange.start_step)
def _arange(ctx, start, end=None, step=1, **kwargs):
    n = ctx.shape[0]
    return (jnp.arange(n, dtype=jnp.float64) * step + start).astype(ctx.jdtype) if ctx.dtype.is_floating_point \
        else (jnp.arange(n, dtype=jnp.int64) * step + start).astype(ctx.jdtype)


@register(aten.eye.m)
def _eye(ctx, n, m, **kwargs):
    return jnp.eye(n, m, dtype=ctx.jdtype)


@register(aten.triu_indices.default, aten.tril_indices.default)
def _triangle_indices(ctx, row, col, offset=0, **kwargs):
    # sizes and offset are static ints: the indices are a constant (numpy's order is eager's)
    fn = np.triu_indices if ctx.op is aten.triu_indices.default else np.tril_indices
    return jnp.asarray(np.stack(fn(row, offset, col)), ctx.jdtype).reshape(ctx.shape)


@register(aten.copy.default)
def _copy(ctx, x, src, non_blocking=False):
    # the functional copy (PyTorch's decompositions emit it, e.g. linspace with one
    # step): `src` broadcast to x's shape in x's dtype
    return jnp.broadcast_to(jnp.asarray(src).astype(ctx.jdtype), ctx.shape)


@register(aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar, aten.linspace.Scalar_Tensor)
def _linspace(ctx, start, end, steps, **kwargs):
    """eager's CPU kernel: the step in double for integer outputs (then truncated), in
    the output's dtype otherwise (bfloat16 rounds at each operation, as eager's scalar
    code does); from `start` below half-way and from `end` above."""
    dt = ctx.jdtype
    calc = jnp.float64 if jnp.issubdtype(dt, jnp.integer) else dt
    s = jnp.asarray(start).astype(dt).astype(calc)
    e = jnp.asarray(end).astype(dt).astype(calc)
    if steps == 1:
        return jnp.broadcast_to(s, (1,)).astype(dt)
    step = exact_div(e - s, jnp.asarray(steps - 1, calc))
    i = jnp.arange(steps)
    up = s + step * i.astype(calc)
    down = e - step * (steps - 1 - i).astype(calc)
    return jnp.where(i < steps // 2, up, down).astype(dt)
