"""Cumulative extrema and log-sum-exp along a dimension.

cummax / cummin index as eager's CPU kernel does: a later element replaces the
running extreme when it is at least as large (small), and a NaN, once seen, stays
the running value while each later NaN takes its index. As a binary operation on
(value, index) pairs this is associative (a max under the order "NaN above
everything, ties broken by the later index"), so lax.associative_scan computes it.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import opmath
from .registry import register

aten = torch.ops.aten


def _cum_extreme(x, dim: int, later_wins):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    idx = jnp.broadcast_to(jnp.arange(x.shape[axis], dtype=jnp.int64).reshape(shape), x.shape)

    def combine(a, b):
        take_b = later_wins(a[0], b[0])
        return jnp.where(take_b, b[0], a[0]), jnp.where(take_b, b[1], a[1])

    return lax.associative_scan(combine, (x, idx), axis=axis)


def _isnan(v):
    return jnp.isnan(v) if jnp.issubdtype(v.dtype, jnp.inexact) else jnp.zeros(v.shape, bool)


@register(aten.cummax.default)
def _cummax(ctx, x, dim):
    return _cum_extreme(x, dim, lambda a, b: _isnan(b) | (~_isnan(a) & (b >= a)))


@register(aten.cummin.default)
def _cummin(ctx, x, dim):
    return _cum_extreme(x, dim, lambda a, b: _isnan(b) | (~_isnan(a) & (b <= a)))


@register(aten.logcumsumexp.default, aten._logcumsumexp.default)
def _logcumsumexp(ctx, x, dim):
    if x.ndim == 0:
        return x
    return lax.cumlogsumexp(x.astype(opmath(ctx.jdtype)), axis=dim % x.ndim)
