"""histc, histogram and histogramdd (static bin counts) as decompositions over lazy tensors.

They are not lowering rules: eager has no meta kernel for histogram (the output spec a
rule needs), and the counting is a scatter-add that lowers as it is.

An element x falls in bin i when edges[i] <= x < edges[i + 1], the last bin also
holding x == edges[-1]; NaN and out-of-range elements are not counted. That is
eager's rule for every histogram op (its linear-interpolation kernels correct their
guess against the edges; see aten/src/ATen/native/cpu/HistogramKernel.cpp).
"""
from __future__ import annotations

import math

import torch

from ..ir.ops import registrar

aten = torch.ops.aten
register_decomposition = registrar("decomposition")


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


def _upper_bound(edges, values):
    """std::upper_bound's index of each value in `edges`, step for step (the same
    midpoints), so that unsorted edges give eager's bins too, not just sorted ones."""
    n = edges.shape[0]
    first = torch.zeros(values.shape, dtype=torch.int64, device=values.device)
    count = torch.full(values.shape, n, dtype=torch.int64, device=values.device)
    for _ in range(n.bit_length()):  # count at least halves each step
        step = count // 2
        probe = first + step
        right = (count > 0) & ~(values < edges[probe.clamp(max=max(n - 1, 0))])
        first = torch.where(right, probe + 1, first)
        count = torch.where(right, count - step - 1, torch.where(count > 0, step, count))
    return first


def _count(points, edges: list, weight):
    """Weighted counts of the (M, D) `points` in the D-dimensional grid of `edges`: eager's
    histogramdd kernel, which skips a point with a coordinate outside [edges[0],
    edges[-1]] or NaN and puts one on the last edge in the last bin."""
    shape = [e.shape[0] - 1 for e in edges]
    flat = torch.zeros(points.shape[0], dtype=torch.int64, device=points.device)
    counted = torch.ones(points.shape[0], dtype=torch.bool, device=points.device)
    for d, e in enumerate(edges):
        v = points[:, d]
        counted = counted & (v >= e[0]) & (v <= e[-1])
        pos = (_upper_bound(e, v) - 1).clamp(0, max(shape[d] - 1, 0))
        flat = flat * shape[d] + pos
    w = torch.ones_like(points[:, 0]) if weight is None else weight.reshape(-1).to(points.dtype)
    w = torch.where(counted, w, torch.zeros_like(w))
    total = math.prod(shape)
    hist = torch.zeros(total, dtype=points.dtype, device=points.device)
    return hist.index_add(0, flat.clamp(0, max(total - 1, 0)), w).reshape(shape)


def _with_density(hist, edges: list, density: bool):
    """Counts over the total, then over each bin's width along each dimension."""
    if not density:
        return hist
    hist = hist / hist.sum()
    for d, e in enumerate(edges):
        shape = [1] * len(edges)
        shape[d] = -1
        hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return hist


@register_decomposition(aten.histc.default)
def _histc(x, bins=100, min=0, max=0):
    data = min == 0 and max == 0
    lo, hi = _range(x, None if data else min, None if data else max, 1.0, (0.0, 0.0))
    return _count(x.reshape(-1, 1), [_linspace(lo, hi, bins + 1, x)], None)


@register_decomposition(aten.histogram.bin_ct)
def _histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    lo, hi = (None, None) if range is None else range
    lo, hi = _range(x, lo, hi, 0.5, (0.0, 1.0))
    edges = _linspace(lo, hi, bins + 1, x)
    return _with_density(_count(x.reshape(-1, 1), [edges], weight), [edges], density), edges


@register_decomposition(aten.histogram.bins_tensor)
def _histogram_bins(x, bins, *, weight=None, density=False):
    edges = bins.to(x.dtype)
    return _with_density(_count(x.reshape(-1, 1), [edges], weight), [edges], density), edges


def _dd_edges(x, bins, range_):
    """histogramdd's edges: per dimension of the last axis, eager's linspace over the
    given range, else over that coordinate's min and max (widened by 0.5 when equal)."""
    points = x.reshape(-1, x.shape[-1])
    edges = []
    for d, n in enumerate(bins):
        lo, hi = (None, None) if range_ is None else (range_[2 * d], range_[2 * d + 1])
        lo, hi = _range(points[:, d], lo, hi, 0.5, (0.0, 1.0))
        edges.append(_linspace(lo, hi, n + 1, x))
    return points, edges


@register_decomposition(aten._histogramdd_bin_edges.default)
def _histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):
    return _dd_edges(x, bins, range)[1]


@register_decomposition(aten._histogramdd_from_bin_cts.default)
def _histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):
    points, edges = _dd_edges(x, bins, range)
    return _with_density(_count(points, edges, weight), edges, density)


@register_decomposition(aten._histogramdd_from_bin_tensors.default)
def _histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    edges = [b.to(x.dtype) for b in bins]
    return _with_density(_count(x.reshape(-1, x.shape[-1]), edges, weight), edges, density)
