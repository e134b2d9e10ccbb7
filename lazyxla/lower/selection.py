"""Order statistics along a dimension: median, nanmedian, kthvalue, mode.

Values are read off a stable sort (NaN sorts last, as eager orders it). Which of
several equal elements' index eager returns is its CPU kernel's choice; the rules
below are the ones it follows (checked against eager on tie-heavy inputs in
tests/ops/test_selection.py): median and kthvalue give the index of the element the
sort puts in the selected position, mode the last occurrence of the smallest of the
most frequent values.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import nan_mask
from .registry import register

aten = torch.ops.aten


def _sorted(x, axis: int):
    order = jnp.argsort(x, axis=axis, stable=True)
    return jnp.take_along_axis(x, order, axis=axis), order


def _pick(values, order, pos, axis: int, keepdim: bool):
    """Element at (per-slice) sorted position `pos`, and its original index."""
    pos = jnp.expand_dims(pos, axis)
    v = jnp.take_along_axis(values, pos, axis=axis)
    i = jnp.take_along_axis(order, pos, axis=axis).astype(jnp.int64)
    return (v, i) if keepdim else (jnp.squeeze(v, axis), jnp.squeeze(i, axis))


def _median_dim(x, dim, keepdim: bool, ignore_nan: bool):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    values, order = _sorted(x, axis)
    n = x.shape[axis]
    nans = jnp.sum(nan_mask(x), axis=axis)
    if ignore_nan:  # the lower median of the non-NaN values; all NaN: the first NaN
        pos = jnp.maximum(n - nans - 1, 0) // 2
        pos = jnp.where(nans == n, 0, pos)
    else:  # any NaN: the median is NaN, at the first NaN's sorted position
        pos = jnp.where(nans > 0, n - nans, (n - 1) // 2)
    return _pick(values, order, pos, axis, keepdim)


@register(aten.median.dim)
def _median(ctx, x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=False)


@register(aten.nanmedian.dim)
def _nanmedian(ctx, x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=True)


@register(aten.median.default)
def _median_all(ctx, x):
    return _median_dim(x.reshape(-1), 0, False, ignore_nan=False)[0]


@register(aten.nanmedian.default)
def _nanmedian_all(ctx, x):
    return _median_dim(x.reshape(-1), 0, False, ignore_nan=True)[0]


@register(aten.kthvalue.default)
def _kthvalue(ctx, x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    values, order = _sorted(x, axis)
    pos = jnp.full(values.shape[:axis] + values.shape[axis + 1:], k - 1)
    return _pick(values, order, pos, axis, keepdim)


@register(aten.mode.default)
def _mode(ctx, x, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    axis = dim % x.ndim
    values, order = _sorted(jnp.moveaxis(x, axis, -1), -1)
    n = values.shape[-1]
    # run lengths: position p ends a run when the next value differs
    ends = jnp.concatenate([values[..., 1:] != values[..., :-1], jnp.ones(values.shape[:-1] + (1,), bool)], -1)
    start = jnp.concatenate([jnp.ones(values.shape[:-1] + (1,), bool), ends[..., :-1]], -1)
    pos = jnp.arange(n)
    first = lax.cummax(jnp.where(start, pos, 0), axis=values.ndim - 1)  # where each run starts
    freq = jnp.where(ends, pos - first + 1, 0)
    best = jnp.argmax(freq, axis=-1)  # first maximum: the smallest most frequent value
    v, i = _pick(values, order, best, values.ndim - 1, keepdim=True)
    if keepdim:
        return jnp.moveaxis(v, -1, axis), jnp.moveaxis(i, -1, axis)
    return v[..., 0], i[..., 0]


@register(aten.nonzero_static.default)
def _nonzero_static(ctx, x, *, size, fill_value=-1):
    # the first `size` nonzero positions in row-major order, rows past the count
    # filled whole with `fill_value` (a static shape, unlike nonzero's)
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    if x.size == 0:  # jnp.nonzero pads an empty input with zeros, not the fill value
        return jnp.full((size, x.ndim), fill_value, jnp.int64)
    cols = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(cols, axis=1).astype(jnp.int64)
