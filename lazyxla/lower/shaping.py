"""Concatenation, padding, flips, rolls, repeats, triangles and the functional
`*_scatter` ops that decompositions use to write through views."""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import norm_dims
from .registry import register
from .views import view_scatter

aten = torch.ops.aten


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


@register(aten.cat.default)
def _cat(ctx, tensors, dim=0):
    # PyTorch still accepts (and skips) legacy 1-D empty tensors next to N-d ones
    ndim = len(ctx.shape)
    parts = [t.astype(ctx.jdtype) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and ndim != 1)]
    if not parts:
        return jnp.zeros(ctx.shape, ctx.jdtype)
    return jnp.concatenate(parts, axis=_dim(dim, ndim))


@register(aten.stack.default)
def _stack(ctx, tensors, dim=0):
    return jnp.stack([t.astype(ctx.jdtype) for t in tensors], axis=_dim(dim, len(ctx.shape)))


@register(aten.constant_pad_nd.default)
def _constant_pad_nd(ctx, x, pad, value=0):
    # pad = (last_lo, last_hi, second_last_lo, ...); negative pads crop (lax.pad does both)
    config = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        config[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value).astype(x.dtype), config)


@register(aten.flip.default)
def _flip(ctx, x, dims):
    if x.ndim == 0 or not dims:
        return x
    return jnp.flip(x, axis=norm_dims(dims, x.ndim))


@register(aten.roll.default)
def _roll(ctx, x, shifts, dims=()):
    if not dims:
        return jnp.roll(x.reshape(-1), shifts[0]).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), axis=norm_dims(dims, x.ndim))


@register(aten.repeat.default)
def _repeat(ctx, x, repeats):
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, tuple(repeats))


@register(aten.tril.default)
def _tril(ctx, x, diagonal=0):
    return jnp.tril(x, diagonal)


@register(aten.triu.default)
def _triu(ctx, x, diagonal=0):
    return jnp.triu(x, diagonal)


@register(aten.select_scatter.default)
def _select_scatter(ctx, x, src, dim, index):
    return view_scatter(ctx, x, src, aten.select.int, (dim, index))


@register(aten.slice_scatter.default)
def _slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    return view_scatter(ctx, x, src, aten.slice.Tensor, (dim, start, end, step))


@register(aten.diagonal_scatter.default)
def _diagonal_scatter(ctx, x, src, offset=0, dim1=0, dim2=1):
    return view_scatter(ctx, x, src, aten.diagonal.default, (offset, dim1, dim2))


@register(aten.as_strided_scatter.default)
def _as_strided_scatter(ctx, x, src, size, stride, storage_offset=None):
    return view_scatter(ctx, x, src, aten.as_strided.default, (size, stride, storage_offset))
