"""Discrete Fourier transforms: the three ATen primitives every `torch.fft` function
(fft, ifft, rfft, irfft, hfft, ihfft, fft2, fftn, rfftn, irfftn, ..., stft, istft) ends
in after torch has padded/trimmed to `n` and conjugated where the definition asks:

* `_fft_c2c(x, dim, normalization, forward)`: complex -> complex,
* `_fft_r2c(x, dim, normalization, onesided)`: real -> complex, halving the last of `dim`,
* `_fft_c2r(x, dim, normalization, last_dim_size)`: Hermitian half -> real.

`normalization` is torch's `fft_norm_mode`: 0 none, 1 by 1/sqrt(n), 2 by 1/n, whatever
the direction (torch maps `norm="backward"` of an inverse to 2). The transforms run
unscaled through `jnp.fft` (XLA's FFT; JAX moves the axes innermost and splits more
than three) and are scaled here, with n the product of the signal sizes.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from ._util import norm_dims
from .registry import register

aten = torch.ops.aten


def _scaled(y, signal_sizes, normalization: int):
    n = math.prod(signal_sizes)
    if normalization == 0 or n == 0:
        return y
    scale = 1.0 / math.sqrt(n) if normalization == 1 else 1.0 / n
    return y * jnp.asarray(scale, jnp.finfo(y.dtype).dtype)


@register(aten._fft_c2c.default)
def _fft_c2c(ctx, x, dim, normalization, forward):
    axes = norm_dims(tuple(dim), x.ndim)
    # unscaled both ways: "backward" scales only the inverse, "forward" only the forward
    y = jnp.fft.fftn(x, axes=axes, norm="backward") if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scaled(y, [x.shape[a] for a in axes], normalization)


@register(aten._fft_r2c.default)
def _fft_r2c(ctx, x, dim, normalization, onesided):
    axes = norm_dims(tuple(dim), x.ndim)
    x = x.astype(jnp.finfo(ctx.jdtype).dtype)   # the real dtype of the complex output
    y = jnp.fft.rfftn(x, axes=axes, norm="backward") if onesided else \
        jnp.fft.fftn(x.astype(ctx.jdtype), axes=axes, norm="backward")
    return _scaled(y, [x.shape[a] for a in axes], normalization)


@register(aten._fft_c2r.default)
def _fft_c2r(ctx, x, dim, normalization, last_dim_size):
    axes = norm_dims(tuple(dim), x.ndim)
    sizes = [x.shape[a] for a in axes[:-1]] + [last_dim_size]
    y = jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")
    return _scaled(y, sizes, normalization)
