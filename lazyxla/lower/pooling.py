"""2-D max and 2-D/3-D average pooling and their backward ops (adaptive and
fractional pooling: adaptive_pool.py).

Max pooling looks at the kh*kw window offsets as strided slices of the
padded input: the max and PyTorch's flat index (h * W + w within each input
plane) come from one argmax over the offsets, and the backward adds each
offset's share back with an interior-padded `lax.pad` (no scatter). Output
sizes (ceil_mode) are taken from the node's shape, which PyTorch's meta
functions computed.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._util import opmath
from .registry import register

aten = torch.ops.aten


def _pair(v, default=None):
    return _ntuple(v, 2, default)


def _params(kernel_size, stride, padding, dilation=1):
    k = _pair(kernel_size)
    return k, _pair(stride, k), _pair(padding), _pair(dilation)


def _batched(x):
    """(N, C, H, W) view of a 3-D or 4-D input, and the inverse reshape."""
    if x.ndim == 3:
        return x[None], lambda y: y[0]
    return x, lambda y: y


def _lowest(dt):
    return -jnp.inf if jnp.issubdtype(dt, jnp.floating) else jnp.iinfo(dt).min


def _window_offsets(k, d):
    return [(i * d[0], j * d[1]) for i in range(k[0]) for j in range(k[1])]


def _padded_extent(size, out, k, s, p, d):
    """Right padding so that every window of the `out` outputs fits (ceil_mode)."""
    need = (out - 1) * s + d * (k - 1) + 1
    return max(p, need - size - p)


def _max_windows(x, k, s, p, d, oh, ow):
    """(windows (N, C, oh, ow, K), flat input index per window (oh, ow, K), valid mask (oh, ow, K))."""
    H, W = x.shape[-2:]
    ph = _padded_extent(H, oh, k[0], s[0], p[0], d[0])
    pw = _padded_extent(W, ow, k[1], s[1], p[1], d[1])
    xp = lax.pad(x, jnp.asarray(_lowest(x.dtype), x.dtype), [(0, 0, 0), (0, 0, 0), (p[0], ph, 0), (p[1], pw, 0)])
    wins, flat, valid = [], [], []
    rows = np.arange(oh) * s[0] - p[0]
    cols = np.arange(ow) * s[1] - p[1]
    for di, dj in _window_offsets(k, d):
        wins.append(lax.slice(xp, (0, 0, di, dj), (xp.shape[0], xp.shape[1], di + (oh - 1) * s[0] + 1,
                                                   dj + (ow - 1) * s[1] + 1), (1, 1, s[0], s[1])))
        r, c = rows[:, None] + di, cols[None, :] + dj
        flat.append(r * W + c)
        valid.append((r >= 0) & (r < H) & (c >= 0) & (c < W))
    return jnp.stack(wins, axis=-1), np.stack(flat, axis=-1), np.stack(valid, axis=-1)


def _max_pool(x, kernel_size, stride, padding, dilation, out_hw):
    x, unbatch = _batched(x)
    k, s, p, d = _params(kernel_size, stride, padding, dilation)
    oh, ow = out_hw
    wins, flat, valid = _max_windows(x, k, s, p, d, oh, ow)
    best = jnp.argmax(wins, axis=-1)
    # a window whose valid values are all the lowest value keeps its first valid
    # position (PyTorch's initial index), never a padding position
    first_valid = jnp.asarray(np.argmax(valid, axis=-1))
    out = jnp.take_along_axis(wins, best[..., None], axis=-1)[..., 0]
    best = jnp.where(out == _lowest(x.dtype), first_valid, best)
    idx = jnp.take_along_axis(jnp.broadcast_to(jnp.asarray(flat), wins.shape), best[..., None], axis=-1)[..., 0]
    return unbatch(out), unbatch(idx.astype(jnp.int64))


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ctx.shape[0][-2:])


@register(aten.max_pool2d.default)
def _max_pool2d(ctx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ctx.shape[-2:])[0]


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    grad, unbatch = _batched(grad)
    indices, _ = _batched(indices)
    x, _ = _batched(x)
    k, s, p, d = _params(kernel_size, stride, padding, dilation)
    H, W = x.shape[-2:]
    oh, ow = grad.shape[-2:]
    acc = opmath(grad.dtype)
    g = grad.astype(acc)
    rows = np.arange(oh) * s[0] - p[0]
    cols = np.arange(ow) * s[1] - p[1]
    total = jnp.zeros(x.shape[:2] + (H, W), acc)
    for di, dj in _window_offsets(k, d):
        r, c = rows[:, None] + di, cols[None, :] + dj
        share = jnp.where(indices == jnp.asarray(r * W + c), g, jnp.zeros((), acc))
        # output (i, j) of this offset sits at input row r0 + i*s: place with interior padding, then crop
        lo_h, lo_w = int(rows[0]) + di, int(cols[0]) + dj
        hi_h = H - (lo_h + (oh - 1) * s[0] + 1)
        hi_w = W - (lo_w + (ow - 1) * s[1] + 1)
        total = total + lax.pad(share, jnp.zeros((), acc),
                                [(0, 0, 0), (0, 0, 0), (lo_h, hi_h, s[0] - 1), (lo_w, hi_w, s[1] - 1)])
    return unbatch(total)


# -- average pooling ---------------------------------------------------------------------

def _avg_divisor(size, out, k, s, p, count_include_pad):
    """Per-output divisor along one axis, as PyTorch computes it (numpy, static)."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    full = end - start
    clipped = np.minimum(end, size) - np.maximum(start, 0)
    return full if count_include_pad else clipped


def _ntuple(v, n: int, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return (v,) * n
    return tuple(v) * n if len(v) == 1 else tuple(v)


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out):
    """Average pooling over the last len(out) dims of a (N, C, ...) or (C, ...) input."""
    nd = len(out)
    batched = x.ndim == nd + 2
    x = x if batched else x[None]
    k = _ntuple(kernel_size, nd)
    s, p = _ntuple(stride, nd, k), _ntuple(padding, nd)
    sizes = x.shape[2:]
    acc = opmath(x.dtype)
    pads = [(pi, _padded_extent(n, o, ki, si, pi, 1)) for n, o, ki, si, pi in zip(sizes, out, k, s, p)]
    # a constant (numpy) init value lets JAX see a differentiable window sum
    total = lax.reduce_window(x.astype(acc), np.zeros((), acc), lax.add, (1, 1) + k, (1, 1) + s,
                              [(0, 0), (0, 0)] + pads)
    total = total[(Ellipsis,) + tuple(slice(0, o) for o in out)]
    if divisor_override:
        total = total / jnp.asarray(divisor_override, acc)
    else:
        div = np.ones((), np.float64)
        for n, o, ki, si, pi in zip(sizes, out, k, s, p):
            div = np.multiply.outer(div, _avg_divisor(n, o, ki, si, pi, count_include_pad))
        total = total / jnp.asarray(div, acc)
    return total if batched else total[0]


@register(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool_nd(ctx, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
    nd = 3 if ctx.op is aten.avg_pool3d.default else 2
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     ctx.shape[-nd:])


@register(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def _avg_pool_backward(ctx, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override):
    acc = opmath(x.dtype)
    nd = 3 if ctx.op is aten.avg_pool3d_backward.default else 2

    def forward(x_):
        return _avg_pool(x_, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                         grad.shape[-nd:])
    _, vjp = jax.vjp(forward, x.astype(acc))
    return vjp(grad.astype(acc))[0]
