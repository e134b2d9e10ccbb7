"""Resampling with computed weights: grid_sampler_2d / grid_sampler_3d (and their
backward ops) and antialiased bilinear upsampling (`_upsample_bilinear2d_aa` and its
backward).

One sampler, written for any number of spatial dims, serves both grid samplers (bicubic
in 2-d only, as eager). It follows eager's scalar CPU kernels (GridSampler.cpp /
GridSampler.h) step by step, in bfloat16 for bfloat16 inputs (`stepwise_rounding`); the
backward is the VJP of the same sampler (in float32), with eager's subgradients.
Antialiased upsampling is separable: one (out, in) weight matrix per resized axis, built
with eager's filter support, centres and normalisation (UpSampleKernel.cpp `_compute_weights_aa`).

Design: docs/design.md, "lower/sampling.py".
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
_NEAREST, _BICUBIC = 1, 2  # interpolation modes (0: bilinear)
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


def _unnormalize(coord, size: int, align_corners: bool, r):
    """[-1, 1] to pixel coordinates: [0, size - 1], or [-0.5, size - 0.5] without align_corners."""
    if align_corners:
        return r(r(r(coord + 1) / 2) * (size - 1))
    return r(r(r(r(coord + 1) * size) - 1) / 2)


def _pad_coordinates(c, size: int, padding_mode: int, align_corners: bool, r):
    if padding_mode == _BORDER:
        return _clip(c, size)
    if padding_mode == _REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(c, *twice, r), size)
    return c


def _cubic_coefficients(t, r):
    """eager's get_cubic_upsample_coefficients (A = -0.75), rounded per step."""
    a = -0.75

    def near(x):  # |x| <= 1: ((A + 2) x - (A + 3)) x x + 1
        return r(r(r(r(r((a + 2) * x) - (a + 3)) * x) * x) + 1)

    def far(x):  # 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A
        return r(r(r(r(r(r(a * x) - 5 * a) * x) + 8 * a) * x) - 4 * a)
    rest = r(1 - t)
    return far(r(t + 1)), near(t), near(rest), far(r(rest + 1))


def _cubic_mix(values, coeffs, r):
    total = None
    for v, c in zip(values, coeffs):
        total = r(v * c) if total is None else r(total + r(v * c))
    return total


def _grid_sample(x, grid, mode: int, padding_mode: int, align_corners: bool, r):
    """x (N, C, *sizes), grid (N, *out, nd) with coordinates x-first; result (N, C, *out)."""
    nd = grid.shape[-1]
    n, ch, sizes = x.shape[0], x.shape[1], x.shape[2:]
    out_shape = grid.shape[1:-1]
    # spatial axis k (D, H, W order) is grid coordinate nd - 1 - k
    coords = [_unnormalize(grid[..., nd - 1 - k], sizes[k], align_corners, r) for k in range(nd)]
    strides = [math.prod(sizes[k + 1:]) for k in range(nd)]
    planes = x.reshape(n, ch, -1)

    def gather(pos):
        valid = jnp.ones(pos[0].shape, bool)
        for p, s in zip(pos, sizes):
            valid &= (p >= 0) & (p < s)
        flat = sum(jnp.where(valid, p, 0).astype(jnp.int32) * st for p, st in zip(pos, strides))
        flat = jnp.broadcast_to(flat.reshape(n, 1, -1), (n, ch, math.prod(out_shape)))
        vals = jnp.take_along_axis(planes, flat, axis=2).reshape((n, ch) + out_shape)
        return jnp.where(valid[:, None], vals, jnp.zeros((), vals.dtype)), valid[:, None]

    if mode == _BICUBIC:
        # taps at floor - 1 .. floor + 2 of the unclipped coordinate, each padded on its own
        floors = [jnp.floor(c) for c in coords]
        coeffs = [_cubic_coefficients(r(c - f), r) for c, f in zip(coords, floors)]
        rows = []
        for i in range(4):
            taps = [gather([jnp.trunc(_pad_coordinates(r(f + (o - 1)), s, padding_mode, align_corners, r))
                            for f, o, s in zip(floors, (i, j), sizes)])[0] for j in range(4)]
            rows.append(_cubic_mix(taps, [c[:, None] for c in coeffs[1]], r))
        return _cubic_mix(rows, [c[:, None] for c in coeffs[0]], r)
    coords = [_pad_coordinates(c, s, padding_mode, align_corners, r) for c, s in zip(coords, sizes)]
    if mode == _NEAREST:
        return gather([jnp.round(c) for c in coords])[0]
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


@register(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def _grid_sampler(ctx, x, grid, interpolation_mode, padding_mode, align_corners):
    acc = opmath(x.dtype)
    return _grid_sample(x.astype(acc), grid.astype(acc), interpolation_mode, padding_mode, align_corners,
                        stepwise_rounding(x.dtype))


@register(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def _grid_sampler_backward(ctx, grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
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


def _aa_apply(x, sizes_in, sizes_out, align_corners: bool, scales, transpose: bool):
    """Resize the last two dims of x from sizes_in to sizes_out (transpose: the backward,
    grad of sizes_out back to sizes_in) with the weight matrices of `_aa_matrix`."""
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
