"""Special functions (polygamma, Bessel i0, incomplete gamma, frexp, nextafter, gcd)
and the pointwise `prims.*` ops that PyTorch's decompositions of other ops emit
(copysign -> signbit/where/abs/neg, bitwise shifts, i0, igamma, ...).

Shifts follow eager's definition for out-of-range amounts (negative or at least the
bit width): a left shift gives 0, an arithmetic right shift the sign fill; XLA's
shifts read the amount as unsigned and do the same.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import jax.scipy.special as jss
import torch
from jax import lax

from ._util import as_compute
from .elementwise import digamma
from .registry import register

aten = torch.ops.aten
prims = torch.ops.prims


def _float_unary(fn):
    def rule(ctx, x):
        (x,) = as_compute(ctx, x)
        return fn(x)
    return rule


def _same_dtype_binary(fn):
    def rule(ctx, x, y):
        x, y = as_compute(ctx, x, y)
        return fn(x, y)
    return rule


_UNARY = {
    prims.round.default: jnp.round,  # half to even, as torch.round
    prims.neg.default: jnp.negative,
    prims.abs.default: jnp.abs,
    prims.bessel_i0.default: jss.i0, aten.i0.default: jss.i0, prims.bessel_i0e.default: jss.i0e,
    prims.bessel_i1.default: jss.i1, prims.bessel_i1e.default: jss.i1e,
}
_BINARY = {
    prims.mul.default: lambda x, y: jnp.logical_and(x, y) if x.dtype == jnp.bool_ else x * y,
    prims.gcd.default: jnp.gcd, aten.gcd.default: jnp.gcd,
    prims.nextafter.default: jnp.nextafter, aten.nextafter.default: jnp.nextafter,
    prims.igamma.default: jss.gammainc, aten.igamma.default: jss.gammainc,
    prims.igammac.default: jss.gammaincc, aten.igammac.default: jss.gammaincc,
}
for _op, _fn in _UNARY.items():
    register(_op)(_float_unary(_fn))
for _op, _fn in _BINARY.items():
    register(_op)(_same_dtype_binary(_fn))


@register(prims.signbit.default, aten.signbit.default)
def _signbit(ctx, x):
    return jnp.signbit(x)


@register(prims.where.default)
def _where(ctx, pred, a, b):
    a, b = as_compute(ctx, a, b)
    return jnp.where(pred, a, b)


@register(prims.shift_left.default)
def _shift_left(ctx, x, y):
    x, y = as_compute(ctx, x, y)
    return lax.shift_left(x, y)


@register(prims.shift_right_arithmetic.default)
def _shift_right(ctx, x, y):
    x, y = as_compute(ctx, x, y)
    return lax.shift_right_arithmetic(x, y)


@register(prims.frexp.default, aten.frexp.Tensor)
def _frexp(ctx, x):
    mantissa, exponent = jnp.frexp(x)
    return mantissa, exponent.astype(jnp.int32)


def _trigamma(x):
    """Eager's CPU trigamma, step by step in x's dtype: a reflection below 1/2, six
    recurrence steps and an asymptotic series (its float32 result near the poles
    carries the rounding of pi * x, which eager's does too)."""
    one = jnp.ones((), x.dtype)
    pi = jnp.asarray(jnp.pi, x.dtype)
    reflect = x < 0.5
    sin_pi_x = jnp.sin(pi * x)
    result = jnp.where(reflect, -(pi * pi) / (sin_pi_x * sin_pi_x), jnp.zeros((), x.dtype))
    x = jnp.where(reflect, one - x, x)
    for _ in range(6):
        result = result + one / (x * x)
        x = x + one
    ixx = one / (x * x)
    result = result + (one + one / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x
    return jnp.where(reflect, -result, result)


# arguments down to -63 are shifted exactly; below, NaN (documented in _polygamma_high)
_SHIFT_STEPS = 64


def _polygamma_high(n: int, x):
    """psi^(n)(x), n >= 2, accurately (eager sums its zeta in double): jax's polygamma
    is only right for positive x, so shift x up by the recurrence
    psi^(n)(x) = psi^(n)(x + m) - (-1)^n n! sum_{k<m} (x + k)^-(n+1)."""
    x64 = x.astype(jnp.float64)
    m = jnp.maximum(jnp.ceil(1 - x64), 0)
    steps = _SHIFT_STEPS
    k = jnp.arange(steps, dtype=jnp.float64).reshape((steps,) + (1,) * x.ndim)
    terms = jnp.where(k < m, (x64 + k) ** -(n + 1), 0.0)
    sign = 1.0 if n % 2 == 0 else -1.0
    factorial = float(np.prod(np.arange(1, n + 1)))
    shifted = jss.polygamma(n, x64 + m)
    out = shifted - sign * factorial * jnp.sum(terms, axis=0)
    # below -steps + 1 the shift would be incomplete: NaN rather than a wrong value
    out = jnp.where(m > steps, jnp.nan, out)
    # at a pole eager's zeta is +inf, times its sign (-1)^(n+1)
    return jnp.where((x64 <= 0) & (x64 == jnp.floor(x64)), -sign * jnp.inf, out)


@register(aten.polygamma.default)
def _polygamma(ctx, n, x):
    (x,) = as_compute(ctx, x)
    if n == 0:
        return digamma(x)
    if n == 1:
        return _trigamma(x)
    return _polygamma_high(n, x)

