"""View ops: the forward view and the scatter back into the base (write-through).

`view_scatter(ctx, base, src, op, vargs)` returns `base` with the positions
that view `op(base, *vargs)` reads replaced by `src`. Simple views use a
direct inverse (slices become `.at[...].set`, reshapes reshape back,
permutations permute back); the rest (`as_strided`, `diagonal`, `unfold`)
go through a constant index map: apply the view to `arange(numel)` to learn
which base element each view element is, then scatter.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..ir.node import VIEW_SCATTER
from ..ir.ops import facts, register_fact
from .registry import register

aten = torch.ops.aten


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


@register(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default,
          aten.view_copy.default, aten.reshape.default)
def _reshape(ctx, x, *args):
    return jnp.reshape(x, ctx.shape)


@register(aten.t.default)
def _t(ctx, x):
    return x.T if x.ndim == 2 else x


@register(aten.transpose.int)
def _transpose(ctx, x, d0, d1):
    return jnp.swapaxes(x, d0, d1) if x.ndim else x  # a 0-d tensor transposes to itself


@register(aten.permute.default, aten.permute_copy.default)
def _permute(ctx, x, dims):
    return jnp.transpose(x, [_dim(d, x.ndim) for d in dims])


@register(aten.expand.default, aten.expand_copy.default)
def _expand(ctx, x, size, implicit=False):
    return jnp.broadcast_to(x, ctx.shape)


def _slice_bounds(size: int, start, end, step) -> tuple[int, int, int]:
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    return start, end, step


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, x.ndim)
    s, e, st = _slice_bounds(x.shape[dim], start, end, step)
    return lax.slice_in_dim(x, s, max(s, e), st, axis=dim)


@register(aten.select.int, aten.select_copy.int)
def _select(ctx, x, dim, index):
    dim = _dim(dim, x.ndim)
    index = index + x.shape[dim] if index < 0 else index
    return lax.index_in_dim(x, index, axis=dim, keepdims=False)


@register(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def _unsqueeze(ctx, x, dim):
    return jnp.expand_dims(x, _dim(dim, x.ndim + 1))


@register(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze_copy.dim)
def _squeeze(ctx, x, *dims):
    return jnp.reshape(x, ctx.shape)


@register(aten.alias.default, aten.lift_fresh_copy.default, aten.clone.default,
          aten.alias_copy.default, aten.detach_copy.default)
def _identity(ctx, x, *args, **kwargs):
    return x


@register(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, _dim(dim1, x.ndim), _dim(dim2, x.ndim))


@register(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    idx = _strided_index(size, stride, storage_offset or 0)
    return jnp.reshape(x, (-1,))[idx]


@register(aten.unfold.default)
def _unfold(ctx, x, dim, size, step):
    if x.ndim == 0:  # eager: shape (size,) with size 0 or 1, no window dimension
        return jnp.broadcast_to(x, (size,))
    dim = _dim(dim, x.ndim)
    n = (x.shape[dim] - size) // step + 1
    starts = np.arange(n) * step
    idx = starts[:, None] + np.arange(size)[None, :]
    g = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=dim)
    g = jnp.reshape(g, x.shape[:dim] + (n, size) + x.shape[dim + 1:])
    return jnp.moveaxis(g, dim + 1, -1)


def _strided_index(size, stride, offset) -> np.ndarray:
    idx = np.full(tuple(size), offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n) * s).reshape(shape)
    return idx


def _index_map(op, base_shape, vargs) -> np.ndarray:
    """Which flat base element each element of the view reads (constant)."""
    ids = torch.arange(int(np.prod(base_shape)), dtype=torch.int64).reshape(base_shape)
    return op(ids, *vargs).contiguous().numpy()


# view op -> (inverse, whether the new values take the base's dtype first): the op records'
# view_inverse facts
_DIRECT_SCATTER = facts("view_inverse")


def register_scatter(*ops, cast: bool = True):
    """Register `fn(base, src, *vargs)`: `base` with the view's elements replaced by `src`.
    `cast=False` for views that change the dtype (view_as_real): their inverse converts."""
    def deco(fn):
        for op in ops:
            register_fact(op, "view_inverse", (fn, cast))
        return fn
    return deco


@register_scatter(aten.slice.Tensor)
def _slice_scatter(base, src, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, base.ndim)
    s, e, st = _slice_bounds(base.shape[dim], start, end, step)
    index = [slice(None)] * base.ndim
    index[dim] = slice(s, e, st)
    return base.at[tuple(index)].set(src)


@register_scatter(aten.select.int)
def _select_scatter(base, src, dim, index):
    dim = _dim(dim, base.ndim)
    idx = [slice(None)] * base.ndim
    idx[dim] = index
    return base.at[tuple(idx)].set(src)


@register_scatter(aten.view.default, aten._reshape_alias.default, aten.unsqueeze.default, aten.squeeze.default,
                  aten.squeeze.dim, aten.squeeze.dims, aten.alias.default)
def _reshape_back(base, src, *args):
    return jnp.reshape(src, base.shape)


def _self_inverse(forward):
    """Scatter for a view that is its own inverse: apply it to the new values."""
    return lambda base, src, *args: forward(None, src, *args)


register_scatter(aten.t.default)(_self_inverse(_t))
register_scatter(aten.transpose.int)(_self_inverse(_transpose))


@register_scatter(aten.permute.default)
def _permute_back(base, src, dims):
    dims = [_dim(d, base.ndim) for d in dims]
    return jnp.transpose(src, np.argsort(dims))


@register(VIEW_SCATTER)
def view_scatter(ctx, base, src, op, vargs):
    direct = _DIRECT_SCATTER.get(op)
    if direct is not None:
        fn, cast = direct
        return fn(base, src.astype(base.dtype) if cast else src, *vargs)
    idx = _index_map(op, base.shape, vargs)
    flat = jnp.reshape(base, (-1,)).at[jnp.asarray(idx.reshape(-1))].set(
        jnp.reshape(src.astype(base.dtype), (-1,)))
    return jnp.reshape(flat, base.shape)
