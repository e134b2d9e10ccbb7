"""Resampling with computed weights: grid_sampler_3d (and its backward) and
antialiased bilinear upsampling (`_upsample_bilinear2d_aa` and its backward).

grid_sampler_2d keeps PyTorch's decomposition (it has bicubic, which 3-d lacks);
the sampler here is written for any number of spatial dims and follows eager's
scalar CPU kernel for 3-d (GridSampler.cpp / GridSampler.h): coordinates
unnormalised, then clipped or reflected per padding mode, every corner's weight a
product of per-axis distances taken x, y, z in that order, corners added z-major.
Eager does that arithmetic in the tensor's own dtype, so for bfloat16 every step
is rounded to bfloat16 here too (`stepwise_rounding`). The backward is the VJP of
the same sampler (in float32), with eager's subgradients: 0 where a coordinate is clipped, including at
the clip bounds.

Antialiased upsampling is separable: one (out, in) weight matrix per resized axis,
built once from the sizes with eager's filter support, centres and normalisation
(UpSampleKernel.cpp `_compute_weights_aa`), in its float32/double mix.
"""
from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._util import opmath, stepwise_rounding
from .registry import register

aten = torch.ops.aten
_HIGHEST = lax.Precision.HIGHEST
_BILINEAR, _NEAREST = 0, 1
_BORDER, _REFLECTION = 1, 2


def _clip(c, size: int):
    """eager's clip_coordinates: into [0, size - 1]; NaN goes to size - 1 (std::min)."""
    hi = size - 1
    return jnp.where((c >= hi) | jnp.isnan(c), hi, jnp.where(c <= 0, 0, c)).astype(c.dtype)


def _reflect(c, twice_low: int, twice_high: int, r):
    if twice_low == twice_high:
        return jnp.zeros_like(c)
    lo, span = twice_low / 2, (twice_high - twice_low) / 2
    d = r(c - lo)
    d = jnp.where(d < 0, -d, d)  # not abs: eager's subgradient at 0 is +1
    extra = r(jnp.fmod(d, span))
    flips = jnp.floor(r(d / span))
    return jnp.where(jnp.fmod(flips, 2) == 0, r(extra + lo), r(r(span - extra) + lo))


def _source_index(coord, size: int, padding_mode: int, align_corners: bool, r):
    if align_corners:
        c = r(r(r(coord + 1) / 2) * (size - 1))
    else:
        c = r(r(r(r(coord + 1) * size) - 1) / 2)
    if padding_mode == _BORDER:
        return _clip(c, size)
    if padding_mode == _REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(c, *twice, r), size)
    return c


def _grid_sample(x, grid, mode: int, padding_mode: int, align_corners: bool, r):
    """x (N, C, *sizes), grid (N, *out, nd) with coordinates x-first; result (N, C, *out)."""
    nd = grid.shape[-1]
    n, ch, sizes = x.shape[0], x.shape[1], x.shape[2:]
    out_shape = grid.shape[1:-1]
    # spatial axis k (D, H, W order) is grid coordinate nd - 1 - k
    coords = [_source_index(grid[..., nd - 1 - k], sizes[k], padding_mode, align_corners, r) for k in range(nd)]
    strides = [math.prod(sizes[k + 1:]) for k in range(nd)]
    planes = x.reshape(n, ch, -1)

    def gather(pos):
        valid = jnp.ones(pos[0].shape, bool)
        for p, s in zip(pos, sizes):
            valid &= (p >= 0) & (p < s)
        flat = sum(jnp.where(valid, p, 0).astype(jnp.int32) * st for p, st in zip(pos, strides))
        vals = jnp.take_along_axis(planes, jnp.broadcast_to(flat.reshape(n, 1, -1), (n, ch, math.prod(out_shape))), axis=2)
        return vals.reshape((n, ch) + out_shape), valid[:, None]

    if mode == _NEAREST:
        vals, valid = gather([jnp.round(c) for c in coords])
        return jnp.where(valid, vals, jnp.zeros((), vals.dtype))
    floors = [jnp.floor(c) for c in coords]
    out = jnp.zeros((n, ch) + out_shape, coords[0].dtype)
    for corner in itertools.product((0, 1), repeat=nd):  # z-major, as eager adds them
        w = None
        for k in reversed(range(nd)):  # eager multiplies the x, y, z factors in that order
            f = r(coords[k] - floors[k]) if corner[k] else r((floors[k] + 1) - coords[k])
            w = f if w is None else r(w * f)
        vals, valid = gather([f + o for f, o in zip(floors, corner)])
        out = jnp.where(valid, r(out + r(vals * w[:, None])), out)
    return out


@register(aten.grid_sampler_3d.default)
def _grid_sampler_3d(ctx, x, grid, interpolation_mode, padding_mode, align_corners):
    acc = opmath(x.dtype)
    return _grid_sample(x.astype(acc), grid.astype(acc), interpolation_mode, padding_mode, align_corners,
                        stepwise_rounding(x.dtype))


@register(aten.grid_sampler_3d_backward.default)
def _grid_sampler_3d_backward(ctx, grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    acc = opmath(x.dtype)

    def forward(x_, grid_):
        return _grid_sample(x_, grid_, interpolation_mode, padding_mode, align_corners, lambda v: v)
    _, vjp = jax.vjp(forward, x.astype(acc), grid.astype(acc))
    dx, dgrid = vjp(grad.astype(acc))
    return (dx.astype(ctx.jdtype[0]) if output_mask[0] else None, dgrid.astype(ctx.jdtype[1]))


# -- antialiased bilinear upsampling ----------------------------------------------------------

def _aa_scale(in_size: int, out_size: int, align_corners: bool, scale) -> float:
    """eager's area_pixel_compute_scale, as a float32."""
    if align_corners:
        return np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
    return np.float32(1.0 / scale if scale is not None and scale > 0 else in_size / out_size)


def _aa_matrix(in_size: int, out_size: int, align_corners: bool, scale) -> np.ndarray:
    """(out, in) weights of the antialiased triangle filter: support 1 widened by the
    downscale factor, weights normalised per output. float32 where eager's scalar_t
    is, double where its expressions promote."""
    f32 = np.float32
    s = _aa_scale(in_size, out_size, align_corners, scale)
    support = f32(s) if s >= 1.0 else f32(1.0)
    invscale = f32(1.0 / s) if s >= 1.0 else f32(1.0)
    max_size = int(math.ceil(support)) * 2 + 1
    m = np.zeros((out_size, in_size), np.float32)
    for i in range(out_size):
        center = f32(float(s) * (i + 0.5))
        xmin = max(int(float(center - support) + 0.5), 0)
        xsize = min(max(min(int(float(center + support) + 0.5), in_size) - xmin, 0), max_size)
        w = np.array([f32(max(0.0, 1.0 - abs(f32((float(f32(j + xmin) - center) + 0.5) * float(invscale)))))
                      for j in range(xsize)], np.float32)
        total = np.float32(0)
        for v in w:
            total = f32(total + v)
        m[i, xmin:xmin + xsize] = w / total if total != 0 else w
    return m


def _aa_apply(x, sizes_in, sizes_out, align_corners, scales, transpose: bool):
    acc = opmath(x.dtype)
    y = x.astype(acc)
    for k in (1, 0):  # eager resizes the width first, then the height; unchanged axes untouched
        if sizes_in[k] == sizes_out[k]:
            continue
        m = _aa_matrix(sizes_in[k], sizes_out[k], align_corners, scales[k])
        m = m.T if transpose else m
        y = jnp.moveaxis(jnp.tensordot(y, jnp.asarray(m, acc), axes=([y.ndim - 2 + k], [1]), precision=_HIGHEST),
                         -1, y.ndim - 2 + k)
    return y


@register(aten._upsample_bilinear2d_aa.default)
def _upsample_bilinear2d_aa(ctx, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _aa_apply(x, x.shape[-2:], tuple(output_size), align_corners, (scales_h, scales_w), False)


@register(aten._upsample_bilinear2d_aa_backward.default)
def _upsample_bilinear2d_aa_backward(ctx, grad, output_size, input_size, align_corners, scales_h=None,
                                     scales_w=None):
    return _aa_apply(grad, tuple(input_size[-2:]), tuple(output_size), align_corners, (scales_h, scales_w), True)
