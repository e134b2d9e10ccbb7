"""Cumulative extrema and log-sum-exp along a dimension.

cummax / cummin index as eager's CPU kernel does: a later element replaces the
running extreme when it is at least as large (small), and a NaN, once seen, stays
the running value while each later NaN takes its index. As a binary operation on
(value, index) pairs this is associative (a max under the order "NaN above
everything, ties broken by the later index"), so lax.associative_scan computes it.

Complex logcumsumexp runs eager's sequential loop (lax.scan) instead of a tree: each
step keeps the imaginary part of the operand with the larger real part unwrapped
(log1p(exp(min - max)) + max), so the branch of the result's angle depends on the
order of combination, and eager's values have angles outside (-pi, pi].
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import nan_mask, opmath
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


@register(aten.cummax.default)
def _cummax(ctx, x, dim):
    return _cum_extreme(x, dim, lambda a, b: nan_mask(b) | (~nan_mask(a) & (b >= a)))


@register(aten.cummin.default)
def _cummin(ctx, x, dim):
    return _cum_extreme(x, dim, lambda a, b: nan_mask(b) | (~nan_mask(a) & (b <= a)))


@register(aten.logcumsumexp.default, aten._logcumsumexp.default)
def _logcumsumexp(ctx, x, dim):
    if x.ndim == 0:
        return x
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return _complex_logcumsumexp(x, dim % x.ndim)
    return lax.cumlogsumexp(x.astype(opmath(ctx.jdtype)), axis=dim % x.ndim)


def _complex_log_add_exp(x, y):
    """Eager's `_log_add_exp_helper` for complex values: NaNs are infectious, equal
    infinite real parts are handled apart, otherwise the larger real part leads."""
    nan_x = jnp.isnan(x.real) | jnp.isnan(x.imag)
    nan_y = jnp.isnan(y.real) | jnp.isnan(y.imag)
    x_smaller = x.real < y.real
    lo = jnp.where(nan_y, y, jnp.where(nan_x, x, jnp.where(x_smaller, x, y)))
    hi = jnp.where(nan_y, y, jnp.where(nan_x, x, jnp.where(x_smaller, y, x)))
    both_inf = ~jnp.isfinite(lo.real) & (lo.real == hi.real)
    inf_case = jnp.where(lo.real < 0, lo, jnp.log(jnp.exp(lo) + jnp.exp(hi)))
    general = jnp.log1p(jnp.exp(lo - hi)) + hi
    nan = jnp.full_like(x, complex(jnp.nan, jnp.nan))
    return jnp.where(nan_x | nan_y, nan, jnp.where(both_inf, inf_case, general))


def _complex_logcumsumexp(x, axis: int):
    def step(acc, v):
        acc = _complex_log_add_exp(v, acc)
        return acc, acc

    start = jnp.full(x.shape[:axis] + x.shape[axis + 1:], -jnp.inf, x.dtype)
    _, out = lax.scan(step, start, jnp.moveaxis(x, axis, 0))
    return jnp.moveaxis(out, 0, axis)
