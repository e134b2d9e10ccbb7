"""Binning: searchsorted, bucketize, histc, histogram (static bin counts).

An element x falls in bin i when edges[i] <= x < edges[i + 1], the last bin also
holding x == edges[-1]; NaN and out-of-range elements are not counted. That is
eager's rule for every histogram op (its linear-interpolation kernels correct their
guess against the edges; see aten/src/ATen/native/cpu/HistogramKernel.cpp), and a
right-sided search in the edges gives it directly. `bincount` has an output size that
depends on the data (max + 1) and stays on the host.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from .registry import register

aten = torch.ops.aten


def search(seq, values, right: bool):
    """Per-row searchsorted: `seq` 1-d, or (*batch, n) with `values` (*batch, m)."""
    side = "right" if right else "left"
    if seq.ndim <= 1:
        return jnp.searchsorted(seq, values, side=side)
    batch = seq.shape[:-1]
    flat_seq = seq.reshape((-1, seq.shape[-1]))
    flat_val = values.reshape((flat_seq.shape[0], -1))
    out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(flat_seq, flat_val)
    return out.reshape(batch + values.shape[-1:])


@register(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(ctx, seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    return search(seq, jnp.asarray(values), right or side == "right")


@register(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(ctx, values, boundaries, *, out_int32=False, right=False):
    return search(boundaries, jnp.asarray(values), right)


def _bin_of(x, edges):
    """Bin index of each element and whether it is counted."""
    nbins = edges.shape[0] - 1
    pos = jnp.searchsorted(edges, x, side="right") - 1
    pos = jnp.where(x == edges[-1], nbins - 1, pos)
    counted = (pos >= 0) & (pos < nbins) & ~jnp.isnan(x)
    return jnp.clip(pos, 0, max(nbins - 1, 0)), counted


def _count(x, edges, weight, dtype):
    pos, counted = _bin_of(x.reshape(-1), edges)
    w = jnp.ones(pos.shape, dtype) if weight is None else weight.reshape(-1).astype(dtype)
    return jnp.zeros(edges.shape[0] - 1, dtype).at[pos].add(jnp.where(counted, w, 0))


def _edges(x, bins: int, lo, hi, dtype, widen: float):
    """bins + 1 evenly spaced edges over [lo, hi]; lo == hi widens by `widen` each side."""
    same = lo == hi
    lo, hi = jnp.where(same, lo - widen, lo), jnp.where(same, hi + widen, hi)
    return jnp.linspace(lo, hi, bins + 1, dtype=dtype)


def _data_range(x, dtype):
    if x.size == 0:
        return jnp.zeros((), dtype), jnp.zeros((), dtype)
    return jnp.min(x).astype(dtype), jnp.max(x).astype(dtype)


@register(aten.histc.default)
def _histc(ctx, x, bins=100, min=0, max=0):
    dt = ctx.jdtype
    lo, hi = jnp.asarray(min, dt), jnp.asarray(max, dt)
    data_lo, data_hi = _data_range(x, dt)
    use_data = (lo == 0) & (hi == 0)
    lo, hi = jnp.where(use_data, data_lo, lo), jnp.where(use_data, data_hi, hi)
    return _count(x.astype(dt), _edges(x, bins, lo, hi, dt, 1.0), None, dt)


def _density(hist, edges):
    return hist / (jnp.sum(hist) * jnp.diff(edges))


@register(aten.histogram.bin_ct)
def _histogram_bin_ct(ctx, x, bins=100, *, range=None, weight=None, density=False):
    dt = ctx.jdtype[0]
    if range is not None:
        lo, hi = jnp.asarray(range[0], dt), jnp.asarray(range[1], dt)
    else:
        lo, hi = _data_range(x, dt)
    edges = _edges(x, bins, lo, hi, dt, 0.5)
    hist = _count(x.astype(dt), edges, weight, dt)
    return (_density(hist, edges) if density else hist), edges


@register(aten.histogram.bins_tensor)
def _histogram_bins(ctx, x, bins, *, weight=None, density=False):
    dt = ctx.jdtype[0]
    edges = bins.astype(dt)
    hist = _count(x.astype(dt), edges, weight, dt)
    return (_density(hist, edges) if density else hist), edges
