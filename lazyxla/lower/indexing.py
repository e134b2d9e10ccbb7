"""Gather/scatter, advanced indexing and index_* ops, embedding.

Index values are runtime data, so every rule here is shape-static: negative
indices wrap like PyTorch (`where(i < 0, i + n, i)`); out-of-range indices,
which eager PyTorch rejects with an error, are clamped by XLA instead.
Boolean masks in `x[mask]` have a data-dependent result shape: the frontend's
decomposition (frontend/indexing.py) reads the mask on the host once and the
gather stays on the device. `x[mask] = v` keeps its shape and needs no host
trip: a running count over the mask picks the value for each selected position.
Sums (scatter_add, index_add, index_put with accumulate) add in float32 for
float16/bfloat16 and cast back once; bool sums add in int32 and cast back, which is
eager's logical or (a product is its and).
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import opmath, position_dtype
from .registry import register

aten = torch.ops.aten


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def _wrap(idx, size: int):
    return jnp.where(idx < 0, idx + size, idx)


def _axis_index(ndim: int, dim: int, index):
    """Index tuple addressing `index` along `dim` and the iota elsewhere (gather/scatter)."""
    return tuple(index if d == dim else lax.broadcasted_iota(jnp.int64, index.shape, d) for d in range(ndim))


def _prefix(x, shape):
    """x[:shape[0], :shape[1], ...]: the part of `x` an index of `shape` addresses."""
    if tuple(x.shape) == tuple(shape):
        return x
    return lax.slice(x, (0,) * x.ndim, tuple(shape))


def _accumulator(dt):
    """The dtype a scatter or index sum computes in (module docstring)."""
    if dt == jnp.bool_:
        return jnp.int32
    return opmath(dt) if jnp.issubdtype(dt, jnp.floating) else dt


# -- gather / scatter ------------------------------------------------------------

@register(aten.gather.default)
def _gather(ctx, x, dim, index, *, sparse_grad=False):
    if index.size == 0:  # eager allows an empty index of any rank
        return jnp.zeros(ctx.shape, x.dtype)
    if x.ndim == 0:
        return jnp.broadcast_to(x, ctx.shape)
    dim = _dim(dim, x.ndim)
    if index.ndim == 0:
        index = index.reshape((1,) * x.ndim)
    shape = tuple(index.shape[d] if d != dim else x.shape[d] for d in range(x.ndim))
    out = jnp.take_along_axis(_prefix(x, shape), _wrap(index, x.shape[dim]), axis=dim, mode="clip")
    return out.reshape(ctx.shape)


_IDENTITY = {"sum": 0, "add": 0, "mean": 0, "prod": 1, "multiply": 1}


def _extreme(dt, lowest: bool):
    if dt == jnp.bool_:
        return not lowest
    if jnp.issubdtype(dt, jnp.floating):
        return -jnp.inf if lowest else jnp.inf
    info = jnp.iinfo(dt)
    return info.min if lowest else info.max


def _scatter(x, dim, index, src, reduce=None, include_self=True):
    """Shared body of every scatter: `x` with `src` scattered at `index` along `dim`."""
    scalar = x.ndim == 0
    if scalar:
        x = x.reshape(1)
        index = index.reshape(1)
        src = jnp.reshape(src, (1,)) if jnp.ndim(src) else src
    dim = _dim(dim, x.ndim)
    if index.ndim == 0:
        index = index.reshape((1,) * x.ndim)
    index = _wrap(index, x.shape[dim])
    src = jnp.asarray(src)
    src = _prefix(src, index.shape) if src.ndim else jnp.broadcast_to(src, index.shape)
    idx = _axis_index(x.ndim, dim, index)
    out_dt = x.dtype
    if reduce is None:
        return x.at[idx].set(src.astype(out_dt)).reshape(()) if scalar else x.at[idx].set(src.astype(out_dt))
    acc = _accumulator(out_dt)
    xa, sa = x.astype(acc), src.astype(acc)
    if not include_self:
        ident = (_extreme(acc, reduce == "amax") if reduce in ("amax", "amin") else _IDENTITY[reduce])
        touched = jnp.zeros(x.shape, jnp.bool_).at[idx].set(True)
        xa = jnp.where(touched, jnp.asarray(ident, acc), xa)
    if reduce in ("sum", "add"):
        out = xa.at[idx].add(sa)
    elif reduce in ("prod", "multiply"):
        out = xa.at[idx].multiply(sa)
    elif reduce == "amax":
        out = xa.at[idx].max(sa)
    elif reduce == "amin":
        out = xa.at[idx].min(sa)
    elif reduce == "mean":
        count = jnp.full(x.shape, 1 if include_self else 0, jnp.int64).at[idx].add(1)
        count = jnp.maximum(count, 1)
        out = xa.at[idx].add(sa)
        out = out / count.astype(acc) if jnp.issubdtype(acc, jnp.floating) else jnp.floor_divide(out, count)
    else:
        raise ValueError(f"lazyxla: unknown scatter reduction {reduce!r}")
    out = out.astype(out_dt)
    return out.reshape(()) if scalar else out


@register(aten.scatter.src, aten.scatter.value)
def _scatter_set(ctx, x, dim, index, src):
    return _scatter(x, dim, index, src)


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_reduce_legacy(ctx, x, dim, index, src, *, reduce):
    return _scatter(x, dim, index, src, reduce)


@register(aten.scatter_add.default)
def _scatter_add(ctx, x, dim, index, src):
    return _scatter(x, dim, index, src, "sum")


@register(aten.scatter_reduce.two)
def _scatter_reduce(ctx, x, dim, index, src, reduce, *, include_self=True):
    return _scatter(x, dim, index, src, reduce, include_self)


# -- index_* along one dim -----------------------------------------------------------

def _along(ndim: int, dim: int, index) -> tuple:
    return (slice(None),) * dim + (index,) + (slice(None),) * (ndim - dim - 1)


@register(aten.index_select.default)
def _index_select(ctx, x, dim, index):
    if x.ndim == 0:
        return jnp.broadcast_to(x, ctx.shape)
    dim = _dim(dim, x.ndim)
    idx = _wrap(index.reshape(-1), x.shape[dim])
    return jnp.take(x, idx, axis=dim, mode="clip").reshape(ctx.shape)


def _index_write(x, dim, index, source, mode, alpha=None):
    scalar = x.ndim == 0
    if scalar:
        x = x.reshape(1)
    dim = _dim(dim, x.ndim)
    idx = _along(x.ndim, dim, _wrap(index.reshape(-1), x.shape[dim]))
    source = jnp.asarray(source)
    if source.ndim and source.ndim != x.ndim:  # 0-d source/index pairs on >0-d x
        source = jnp.expand_dims(source, dim) if source.ndim + 1 == x.ndim else source.reshape(-1)
    if mode == "add":
        acc = _accumulator(x.dtype)
        src = source.astype(acc)
        if alpha is not None:
            src = src * jnp.asarray(alpha).astype(acc)
        out = x.astype(acc).at[idx].add(src).astype(x.dtype)
    else:
        out = x.at[idx].set(source.astype(x.dtype))
    return out.reshape(()) if scalar else out


@register(aten.index_copy.default)
def _index_copy(ctx, x, dim, index, source):
    return _index_write(x, dim, index, source, "set")


@register(aten.index_add.default)
def _index_add(ctx, x, dim, index, source, *, alpha=1):
    return _index_write(x, dim, index, source, "add", alpha)


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def _index_fill(ctx, x, dim, index, value):
    return _index_write(x, dim, index, jnp.asarray(value), "set")


# -- advanced indexing: the device side (frontend/indexing.py turns masks into indices) --

def _jnp_index(x, indices) -> tuple:
    out = []
    for d, t in enumerate(indices):
        out.append(slice(None) if t is None else _wrap(t, x.shape[d]))
    return tuple(out)


@register(aten._unsafe_index.Tensor)
def _unsafe_index(ctx, x, indices):
    return x[_jnp_index(x, indices)]


@register(aten._unsafe_index_put.default)
def _unsafe_index_put(ctx, x, indices, values, accumulate=False):
    if any(t is not None and t.dtype == jnp.bool_ for t in indices):
        return _mask_put(x, indices, values, accumulate)
    idx = _jnp_index(x, indices)
    if accumulate:
        acc = _accumulator(x.dtype)
        return x.astype(acc).at[idx].add(values.astype(acc)).astype(x.dtype)
    return x.at[idx].set(values.astype(x.dtype))


def _mask_put(x, indices, values, accumulate):
    """x[..., mask, ...] = values with a k-d mask over dims p..p+k: the j-th selected
    position takes values' j-th row along the mask's result dim (a running count)."""
    p = next(i for i, t in enumerate(indices) if t is not None)
    mask = indices[p]
    lead, rest = x.shape[:p], x.shape[p + mask.ndim:]
    rank = len(lead) + 1 + len(rest)
    v = jnp.asarray(values).astype(x.dtype if not accumulate else opmath(x.dtype))
    v = v.reshape((1,) * (rank - v.ndim) + v.shape)
    k = v.shape[p]
    v = jnp.broadcast_to(v, lead + (k,) + rest)
    if k == 0:  # no row to write: a valid program's mask selects nothing
        return x
    pos = jnp.clip(jnp.cumsum(mask.reshape(-1).astype(position_dtype(mask.size))) - 1, 0, k - 1)
    picked = jnp.take(v, pos, axis=p).reshape(lead + mask.shape + rest)
    m = mask.reshape((1,) * p + mask.shape + (1,) * len(rest))
    if accumulate:
        acc = _accumulator(x.dtype)
        return (x.astype(acc) + jnp.where(m, picked.astype(acc), jnp.zeros((), acc))).astype(x.dtype)
    return jnp.where(m, picked, x)


@register(aten.masked_scatter.default)
def _masked_scatter(ctx, x, mask, source):
    x = jnp.broadcast_to(x, ctx.shape)
    m = jnp.broadcast_to(mask, ctx.shape).reshape(-1)
    src = source.reshape(-1).astype(x.dtype)
    pos = jnp.clip(jnp.cumsum(m.astype(position_dtype(m.size))) - 1, 0, max(src.shape[0] - 1, 0))
    picked = src[pos] if src.shape[0] else jnp.zeros(m.shape, x.dtype)
    return jnp.where(m, picked, x.reshape(-1)).reshape(ctx.shape)


@register(aten.masked_scatter_backward.default)
def _masked_scatter_backward(ctx, grad, mask, sizes):
    n = 1
    for s in ctx.shape:
        n *= s
    m = jnp.broadcast_to(mask, grad.shape).reshape(-1)
    pos = jnp.cumsum(m.astype(position_dtype(n))) - 1
    target = jnp.where(m, pos, n)  # unselected positions drop out of range
    acc = opmath(grad.dtype)
    out = jnp.zeros((n,), acc).at[target].add(grad.reshape(-1).astype(acc), mode="drop")
    return out.reshape(ctx.shape)


# -- embedding ---------------------------------------------------------------------------

@register(aten.embedding.default)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return jnp.take(weight, indices, axis=0, mode="clip")


@register(aten.embedding_dense_backward.default)
def _embedding_dense_backward(ctx, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    acc = opmath(ctx.jdtype)
    idx = indices.reshape(-1)
    g = grad.reshape((idx.shape[0], -1)).astype(acc)
    if padding_idx >= 0:
        g = jnp.where((idx == padding_idx)[:, None], jnp.zeros((), acc), g)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1)
        g = g / jnp.take(counts, idx, mode="clip")[:, None]
    return jnp.zeros((num_weights, g.shape[1]), acc).at[idx].add(g, mode="drop").reshape(ctx.shape)


@register(aten.one_hot.default)
def _one_hot(ctx, x, num_classes=-1):
    return (x[..., None] == jnp.arange(ctx.shape[-1], dtype=x.dtype)).astype(ctx.jdtype)



@register(aten.index_reduce.default)
def _index_reduce(ctx, x, dim, index, source, reduce, *, include_self=True):
    # a scatter_reduce whose index is `index` along `dim`, repeated across the other dims
    if x.ndim == 0:
        return _scatter(x, 0, index, source, reduce, include_self)
    dim = _dim(dim, x.ndim)
    source = jnp.asarray(source)
    shape = [1] * source.ndim
    shape[dim] = -1
    full = jnp.broadcast_to(index.reshape(shape), source.shape)
    return _scatter(x, dim, full, source, reduce, include_self)


@register(aten.take.default)
def _take(ctx, x, index):
    # eager's take reads x as flat (row-major); negative indices count from the end
    flat = x.reshape(-1)
    return jnp.take(flat, _wrap(index, flat.shape[0]), mode="clip")


@register(aten.put.default)
def _put(ctx, x, index, source, accumulate=False):
    # take's inverse: x read as flat (row-major), negative indices from the end
    flat = x.reshape(-1)
    idx = _wrap(index.reshape(-1), flat.shape[0])
    src = jnp.asarray(source).reshape(-1).astype(x.dtype)
    out = flat.at[idx].add(src) if accumulate else flat.at[idx].set(src)
    return out.reshape(x.shape)
