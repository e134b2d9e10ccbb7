"""Segment reductions: `segment_reduce` and its backward (lengths or offsets).

The output's shape is static: `data` with `axis` replaced by the number of segments
(lengths' last dimension, offsets' minus one); lengths/offsets have the dims of `data`
before `axis` plus that one. Each segment k spans [start_k, end_k) along `axis` (from
offsets, or the running sum of lengths) and is folded as eager's CPU kernel folds it
(aten/src/ATen/native/SegmentReduce.cpp, cpu/SegmentReduceKernel.cpp): from `initial`
(else the reduction's identity; max/min start at -inf/+inf), one element at a time, with
eager's order, rounding, NaN and tie rules; mean divides the fold by the length (an empty
segment's mean is NaN unless `initial` is given). `unsafe` only skips eager's checks.

Design: docs/design.md, "lower/segments.py".
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from .registry import register

aten = torch.ops.aten

_IDENTITY = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": -jnp.inf, "min": jnp.inf}


def _bounds(lengths, offsets):
    """Per-segment (start, end) along `axis`, shaped (*outer, segments)."""
    if offsets is not None:
        return offsets[..., :-1], offsets[..., 1:]
    end = jnp.cumsum(lengths, axis=-1)
    return end - lengths, end


def _membership(data, lengths, offsets, axis: int):
    """mask[*outer, k, j, *inner-broadcast]: element j along `axis` is in segment k; and
    the segment lengths shaped to broadcast against the (*outer, k, *inner) output."""
    start, end = _bounds(lengths, offsets)
    inner = (1,) * (data.ndim - axis - 1)
    j = jnp.arange(data.shape[axis])
    mask = (j >= start[..., None]) & (j < end[..., None])
    return mask.reshape(mask.shape + inner), (end - start).reshape(start.shape + inner)


_STEP = {
    "sum": lambda acc, x: acc + x,
    "mean": lambda acc, x: acc + x,
    "prod": lambda acc, x: acc * x,
    # std::max / std::min after eager's NaN test: a NaN element wins, a NaN fold stays
    "max": lambda acc, x: jnp.where(jnp.isnan(x) | (acc < x), x, acc),
    "min": lambda acc, x: jnp.where(jnp.isnan(x) | (x < acc), x, acc),
}


@register(aten.segment_reduce.default)
def _segment_reduce(ctx, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                    unsafe=False, initial=None):
    if indices is not None:
        raise NotImplementedError("lazyxla: segment_reduce with indices (eager supports lengths/offsets only)")
    axis = axis % data.ndim
    mask, length = _membership(data, lengths, offsets, axis)
    step = _STEP[reduce]

    def fold(acc, xs):
        # element j of every segment at once, in eager's order and in the data's dtype
        # (bfloat16 sums round at each step as eager's do)
        x, member = xs
        return jnp.where(member, step(acc, jnp.expand_dims(x, axis)), acc), None

    start = _IDENTITY[reduce] if initial is None else initial
    acc = jnp.full(length.shape[:axis + 1] + data.shape[axis + 1:], start, data.dtype)
    out, _ = lax.scan(fold, acc, (jnp.moveaxis(data, axis, 0), jnp.moveaxis(mask, axis + 1, 0)))
    if reduce == "mean":
        empty = jnp.asarray(jnp.nan if initial is None else initial, data.dtype)
        out = jnp.where(length > 0, out / length.astype(data.dtype), empty)
    return out


@register(aten._segment_reduce_backward.default)
def _segment_reduce_backward(ctx, grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                             initial=None):
    axis = axis % data.ndim
    mask, length = _membership(data, lengths, offsets, axis)
    zero = jnp.zeros((), data.dtype)

    def spread(v):
        """Each element's segment's value of `v` (*outer, S, *inner), 0 outside any segment."""
        return jnp.sum(jnp.where(mask, jnp.expand_dims(v, axis + 1), zero), axis=axis)

    x = data
    g = spread(grad)
    if reduce == "sum":
        return g
    if reduce == "mean":
        return spread(grad / jnp.maximum(length, 1).astype(grad.dtype))
    if reduce in ("max", "min"):
        # every element equal to the result (or NaN) gets the gradient; with two or more,
        # eager divides the positive ones by their count
        hit = (jnp.isnan(x) | (x == spread(output))) & jnp.any(mask, axis=axis)
        count = jnp.sum(mask & jnp.expand_dims(hit, axis), axis=axis + 1)
        n = spread(count.astype(grad.dtype))
        gi = jnp.where(hit, g, zero)
        return jnp.where((n >= 2) & (gi > 0), gi / jnp.maximum(n, 1), gi)
    # prod: grad * output / x, or for a zero or NaN element the product of the others
    # (times `initial`), computed over the same-segment pairs
    same = jnp.any(jnp.expand_dims(mask, axis + 2) & jnp.expand_dims(mask, axis + 1), axis=axis)
    d = data.shape[axis]
    same = same & ~jnp.eye(d, dtype=bool).reshape((d, d) + (1,) * (data.ndim - axis - 1))
    others = jnp.prod(jnp.where(same, jnp.expand_dims(x, axis), jnp.ones((), x.dtype)), axis=axis + 1)
    if initial is not None:
        others = others * initial
    special = jnp.isnan(x) | (x == 0)
    return jnp.where(special, g * others, spread(grad * output) / jnp.where(special, 1, x))
