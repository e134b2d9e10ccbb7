"""Complex numbers: building and taking apart complex values, and torch's math-bit views.

A lazy tensor's node always holds its *logical* values. Eager PyTorch's `conj()` and
`_neg_view` are lazy: they flip a bit and leave memory alone, and every kernel reads
memory and bit together. Here the view's lowering applies the conjugation (negation)
itself, so every consumer sees the values eager would read, whatever the bit says; the
frontend still sets the bit on the view (frontend/mathbits.py) so `is_conj()`,
`resolve_conj()` (a copy, not an alias) and eager's refusals behave as on CPU.

Writes through these views go back by each view's inverse (registered as direct
scatters in lower/views.py): conj and negation are their own inverses,
`view_as_real` and `view_as_complex` invert each other.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import as_compute
from .registry import register
from .views import register_scatter

aten = torch.ops.aten


def _conj_values(x):
    return jnp.conj(x) if jnp.iscomplexobj(x) else x


def _split(x):
    """complex (...,) -> real (..., 2): the layout of view_as_real."""
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


def _join(x, dtype=None):
    """real (..., 2) -> complex (...,): the layout of view_as_complex."""
    z = lax.complex(x[..., 0], x[..., 1])
    return z if dtype is None else z.astype(dtype)


@register(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default)
def _conj(ctx, x):
    return _conj_values(x)


@register(aten._neg_view.default)
def _neg_view(ctx, x):
    return jnp.negative(x)


@register(aten.view_as_real.default)
def _view_as_real(ctx, x):
    return _split(x)


@register(aten.view_as_complex.default)
def _view_as_complex(ctx, x):
    return _join(x)


register_scatter(aten._conj.default, cast=True)(lambda base, src: _conj_values(src))
register_scatter(aten._neg_view.default, cast=True)(lambda base, src: jnp.negative(src))
register_scatter(aten.view_as_real.default, cast=False)(lambda base, src: _join(src, base.dtype))
register_scatter(aten.view_as_complex.default, cast=False)(lambda base, src: _split(src).astype(base.dtype))


@register(aten.complex.default)
def _complex(ctx, real, imag):
    part = jnp.finfo(ctx.jdtype).dtype   # float32 for complex64, float64 for complex128
    real, imag = jnp.broadcast_arrays(real.astype(part), imag.astype(part))
    return lax.complex(real, imag)


@register(aten.polar.default)
def _polar(ctx, r, theta):
    # eager: abs * cos(angle) + i abs * sin(angle), each part in the real dtype
    return lax.complex(r * jnp.cos(theta), r * jnp.sin(theta))


@register(aten.angle.default)
def _angle(ctx, x):
    if jnp.iscomplexobj(x):
        return jnp.angle(x)
    # eager on reals: pi for x < 0, 0 for x >= 0 (-0 included: atan2 would say pi), nan kept
    (x,) = as_compute(ctx, x)
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.pi, 0).astype(x.dtype))
