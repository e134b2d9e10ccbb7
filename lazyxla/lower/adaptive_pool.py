"""Adaptive average / max pooling and fractional max pooling over the last n dims
(1-d through 3-d), and their backward ops.

Adaptive windows depend only on the sizes: output i along an axis of `size` inputs
covers [floor(i*size/out), ceil((i+1)*size/out)). Averages are one per-axis
averaging matrix each (an einsum, separable); maxima gather every window's
positions at once. Fractional max pooling is the same windowed max with window
starts computed from its `random_samples` tensor (per plane, so per-plane
positions): the output shape stays static, only the gather positions depend on
values. All max pools return PyTorch's flat index within the input plane, and their
backward ops are one scatter-add by that index. Where eager computes in bfloat16
itself (3-d adaptive average, fractional window starts) each step is rounded to
bfloat16 as there.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._util import opmath, stepwise_rounding
from .registry import register

aten = torch.ops.aten
_HIGHEST = lax.Precision.HIGHEST
_LETTERS = "abc"


def _bounds(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """(out, size) averaging matrix of the adaptive windows."""
    lo, hi = _bounds(size, out)
    cols = np.arange(size)
    inside = (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])
    return inside / (hi - lo)[:, None]


def _apply_per_axis(x, mats, acc):
    """Contract each of the last len(mats) dims of x with its (out, in) matrix."""
    nd = len(mats)
    src = "".join(c.upper() for c in _LETTERS[:nd])
    terms = ",".join(f"{c}{c.upper()}" for c in _LETTERS[:nd])
    return jnp.einsum(f"{terms},...{src}->...{_LETTERS[:nd]}", *(jnp.asarray(m, acc) for m in mats),
                      x.astype(acc), precision=_HIGHEST)


@register(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default,
          aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def _adaptive_avg_pool(ctx, x, output_size):
    nd = len(output_size)
    sizes, outs = x.shape[-nd:], tuple(ctx.shape[-nd:])
    acc = opmath(x.dtype)
    if nd == 3 and acc != x.dtype:
        return _adaptive_avg_pool3d_rounded(x, sizes, outs)
    if all(n % o == 0 for n, o in zip(sizes, outs)):  # equal windows: a reshape and a mean
        split = sum(((o, n // o) for n, o in zip(sizes, outs)), ())
        y = x.astype(acc).reshape(x.shape[:-nd] + split)
        return jnp.mean(y, axis=tuple(range(-1, -2 * nd, -2)))
    return _apply_per_axis(x, [_adaptive_matrix(n, o) for n, o in zip(sizes, outs)], acc)


def _adaptive_avg_pool3d_rounded(x, sizes, outs):
    """Eager's 3-d kernel (AdaptiveAveragePooling3d.cpp, unlike the 2-d one) sums each
    window in the tensor's own dtype, in window order, then divides by kT, kH, kW in
    turn: in bfloat16 every add and division rounds, which moves results by up to two
    bf16 ulps from a float32 mean. Reproduced: a scan over the window positions."""
    r = stepwise_rounding(x.dtype)
    bounds = [_bounds(n, o) for n, o in zip(sizes, outs)]
    positions = [_adaptive_positions(n, o) for n, o in zip(sizes, outs)]
    vals, _ = _gather_windows(x, positions)
    inside = _window_grid([(np.arange(p.shape[2])[None, :] < (hi - lo)[:, None])[None]
                           for p, (lo, hi) in zip(positions, bounds)], np.logical_and)
    inside = jnp.broadcast_to(jnp.asarray(inside), vals.shape)

    def add(total, step):
        v, ok = step
        return jnp.where(ok, r(total + v), total), None
    total, _ = lax.scan(add, jnp.zeros(vals.shape[:2], jnp.float32),
                        (jnp.moveaxis(vals.astype(jnp.float32), -1, 0), jnp.moveaxis(inside, -1, 0)))
    total = total.reshape(vals.shape[:1] + outs)
    for a, (lo, hi) in enumerate(bounds):
        shape = [1] * (1 + len(outs))
        shape[1 + a] = -1
        total = r(total / jnp.asarray((hi - lo).reshape(shape), jnp.float32))
    return total.reshape(x.shape[:-3] + outs)


@register(aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool_backward(ctx, grad, x):
    nd = 3 if ctx.op is aten._adaptive_avg_pool3d_backward.default else 2
    mats = [_adaptive_matrix(n, o).T for n, o in zip(x.shape[-nd:], grad.shape[-nd:])]
    return _apply_per_axis(grad, mats, opmath(x.dtype))


# -- windows as gathers, windowed max with PyTorch's flat indices ---------------------------

def _window_grid(per_axis, combine):
    """Combine per-axis arrays (P, out_a, K_a) into one (P, prod(out), prod(K)), outputs
    and window positions each row-major over the axes (the order eager scans them)."""
    nd = len(per_axis)
    outs = tuple(p.shape[1] for p in per_axis)
    ks = tuple(p.shape[2] for p in per_axis)
    grid = None
    for a, arr in enumerate(per_axis):
        shape = [arr.shape[0]] + [1] * (2 * nd)
        shape[1 + a], shape[1 + nd + a] = outs[a], ks[a]
        arr = arr.reshape(shape)
        grid = arr if grid is None else combine(grid, arr)
    return grid.reshape(grid.shape[0], math.prod(outs), math.prod(ks))


def _gather_windows(x, positions):
    """(values, flat input index), each (planes, prod(out), prod(K)), of the windows of
    the last len(positions) dims of x. positions[a]: int array (P, out_a, K_a), the input
    positions of each window along axis a, for P = 1 (shared) or one row per plane."""
    sizes = x.shape[-len(positions):]
    planes = x.reshape((-1, math.prod(sizes)))
    flat = _window_grid([jnp.asarray(p) * math.prod(sizes[a + 1:]) for a, p in enumerate(positions)], jnp.add)
    flat = jnp.broadcast_to(flat, (planes.shape[0],) + flat.shape[1:])
    vals = jnp.take_along_axis(planes, flat.reshape(flat.shape[0], flat.shape[1] * flat.shape[2]), axis=1)
    vals = vals.reshape(flat.shape)
    return vals, flat


def _window_max(x, positions):
    """Max over the windows of `positions` (see _gather_windows) and eager's flat index of
    the winner. Like eager's CPU kernels (`val > maxval || isnan(val)`, windows scanned in
    row-major order) the first maximum wins, but the last NaN does."""
    vals, flat = _gather_windows(x, positions)
    best = jnp.argmax(vals, axis=-1)
    if jnp.issubdtype(x.dtype, jnp.floating):
        nan = jnp.isnan(vals)
        last_nan = vals.shape[-1] - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
        best = jnp.where(nan.any(-1), last_nan, best)
    out = jnp.take_along_axis(vals, best[..., None], axis=-1)[..., 0]
    idx = jnp.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
    shape = x.shape[:-len(positions)] + tuple(p.shape[1] for p in positions)
    return out.reshape(shape), idx.astype(jnp.int64).reshape(shape)


def _adaptive_positions(size: int, out: int) -> np.ndarray:
    """(1, out, K) positions of the adaptive windows, K the longest; shorter windows
    repeat their last position (a repeat changes neither the max nor its index)."""
    lo, hi = _bounds(size, out)
    pos = lo[:, None] + np.arange(int((hi - lo).max()))[None, :]
    return np.minimum(pos, (hi - 1)[:, None])[None]


@register(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def _adaptive_max_pool(ctx, x, output_size):
    nd = len(output_size)
    outs = ctx.shape[0][-nd:]
    return _window_max(x, [_adaptive_positions(n, o) for n, o in zip(x.shape[-nd:], outs)])


def _fractional_starts(samples, size: int, out: int, pool: int):
    """(P, out) window starts from one sample per plane, as eager's generate_intervals
    computes them in the samples' own dtype: alpha = (size - pool) / (out - 1),
    start_i = int((i + u) * alpha) - int(u * alpha), the last start size - pool.
    Each step is rounded to the dtype (bfloat16 arithmetic rounds every operation)."""
    rnd = stepwise_rounding(samples.dtype)
    wide = opmath(samples.dtype)
    u = samples.astype(wide)[:, None]
    last = jnp.full((samples.shape[0], 1), size - pool, jnp.int32)
    if out == 1:
        return last
    alpha = rnd(jnp.asarray(size - pool, wide) / jnp.asarray(out - 1, wide))
    i = jnp.arange(out - 1, dtype=wide)[None, :]
    starts = rnd(rnd(i + u) * alpha).astype(jnp.int32) - rnd(u * alpha).astype(jnp.int32)
    return jnp.concatenate([starts, last], axis=1)


@register(aten.fractional_max_pool2d.default, aten.fractional_max_pool3d.default)
def _fractional_max_pool(ctx, x, kernel_size, output_size, random_samples):
    nd = len(output_size)
    # eager's samples per plane: (W, H) in 2-d, (T, H, W) in 3-d
    which = (1, 0) if nd == 2 else (0, 1, 2)
    planes = math.prod(x.shape[:-nd])
    # (N, C, nd) samples, N at least the batch: the first `planes` rows in (n, c) order
    samples = random_samples.reshape(-1, nd)[:planes]
    positions = []
    for a, (size, out, pool) in enumerate(zip(x.shape[-nd:], output_size, kernel_size)):
        starts = _fractional_starts(samples[:, which[a]], size, out, pool)
        positions.append(starts[:, :, None] + jnp.arange(pool, dtype=jnp.int32)[None, None, :])
    return _window_max(x, positions)


@register(aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default,
          aten.fractional_max_pool2d_backward.default, aten.fractional_max_pool3d_backward.default)
def _max_by_index_backward(ctx, grad, x, *args):
    """Each output's gradient added at its flat input index. Eager adds in the input's
    own dtype (`gradInput[index] += g`, bfloat16 rounding at every add), and so does
    this scatter: accumulating in float32 left overlapping bf16 windows 1 ulp off."""
    indices = args[-1]
    nd = 3 if ctx.op in (aten.adaptive_max_pool3d_backward.default,
                         aten.fractional_max_pool3d_backward.default) else 2
    g = grad.astype(x.dtype).reshape((-1, math.prod(grad.shape[-nd:])))
    rows = jnp.arange(g.shape[0])[:, None]
    out = jnp.zeros((g.shape[0], math.prod(x.shape[-nd:])), x.dtype).at[rows, indices.reshape(g.shape)].add(g)
    return out.reshape(x.shape)
