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

from .registry import register, register_decomposition

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


# Histograms are decompositions over lazy tensors, not rules: eager has no meta kernel
# for histogram (the output spec a rule needs), and the counting is a scatter-add that
# lowers as it is.

def _linspace(lo, hi, steps: int, like):
    """eager's CPU linspace, element for element: from the start below half-way, from
    the end above (its rounding decides the bin of an element on an edge)."""
    i = torch.arange(steps, device=like.device, dtype=like.dtype)
    step = (hi - lo) / max(steps - 1, 1)
    return torch.where(i < steps // 2, lo + i * step, hi - (steps - 1 - i) * step)


def _range(x, lo, hi, widen: float, empty_range: tuple):
    """Bin range: the given one, or the data's; an empty one is widened by `widen`."""
    if lo is None:
        if x.numel() == 0:
            lo, hi = empty_range
        else:
            lo, hi = x.min(), x.max()
    lo = torch.as_tensor(lo, dtype=x.dtype, device=x.device)
    hi = torch.as_tensor(hi, dtype=x.dtype, device=x.device)
    same = lo == hi
    return torch.where(same, lo - widen, lo), torch.where(same, hi + widen, hi)


def _count(x, edges, weight):
    nbins = edges.shape[0] - 1
    flat = x.reshape(-1)
    pos = torch.searchsorted(edges, flat, right=True) - 1
    pos = torch.where(flat == edges[-1], nbins - 1, pos)
    counted = (pos >= 0) & (pos < nbins) & ~torch.isnan(flat)
    w = torch.ones_like(flat) if weight is None else weight.reshape(-1).to(x.dtype)
    w = torch.where(counted, w, torch.zeros_like(w))
    return torch.zeros(nbins, dtype=x.dtype, device=x.device).index_add(0, pos.clamp(0, max(nbins - 1, 0)), w)


def _with_density(hist, edges, density: bool):
    return hist / (hist.sum() * (edges[1:] - edges[:-1])) if density else hist


@register_decomposition(aten.histc.default)
def _histc(x, bins=100, min=0, max=0):
    data = min == 0 and max == 0
    lo, hi = _range(x, None if data else min, None if data else max, 1.0, (0.0, 0.0))
    return _count(x, _linspace(lo, hi, bins + 1, x), None)


@register_decomposition(aten.histogram.bin_ct)
def _histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    lo, hi = (None, None) if range is None else range
    lo, hi = _range(x, lo, hi, 0.5, (0.0, 1.0))
    edges = _linspace(lo, hi, bins + 1, x)
    return _with_density(_count(x, edges, weight), edges, density), edges


@register_decomposition(aten.histogram.bins_tensor)
def _histogram_bins(x, bins, *, weight=None, density=False):
    edges = bins.to(x.dtype)
    return _with_density(_count(x, edges, weight), edges, density), edges
