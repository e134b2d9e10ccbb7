"""Special functions (polygamma, Bessel i0, incomplete gamma, erfc/erfcx/log_ndtr,
ndtri, Hurwitz zeta, frexp, nextafter, gcd) and the pointwise `prims.*` ops that
PyTorch's decompositions of other ops emit (copysign -> signbit/where/abs/neg,
bitwise shifts, i0, igamma, erfc, ...).

erfcx, log_ndtr and zeta compute in float64, as eager's zeta does for float32 (its
acc_type). jax's erfcx is exp(x^2) * erfc(x), which underflows to 0 past x ~ 9
(float32) or 26.5 (float64), so the tail takes eager's continued fraction instead.
zeta is eager's algorithm itself: jax's differs at the poles, at x = inf and for q
below about -10 (where it returns garbage for an integer x).

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


def float_unary(fn):
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
    prims.erfc.default: lax.erfc, aten.erfc.default: lax.erfc,
    prims.ndtri.default: jss.ndtri, aten.special_ndtri.default: jss.ndtri,
}
_BINARY = {
    prims.mul.default: lambda x, y: jnp.logical_and(x, y) if x.dtype == jnp.bool_ else x * y,
    prims.gcd.default: jnp.gcd, aten.gcd.default: jnp.gcd,
    prims.nextafter.default: jnp.nextafter, aten.nextafter.default: jnp.nextafter,
    prims.igamma.default: jss.gammainc, aten.igamma.default: jss.gammainc,
    prims.igammac.default: jss.gammaincc, aten.igammac.default: jss.gammaincc,
}
for _op, _fn in _UNARY.items():
    register(_op)(float_unary(_fn))
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


_ISPI = 0.56418958354775628694807945156  # 1 / sqrt(pi)
# below, exp(x^2) * erfc(x) is exact to float64 rounding; above, eager's 5-term
# continued fraction is (its error there is under 1e-15)
_ERFCX_CF_FROM = 25.0
_ERFCX_CF_FROM_FLOAT32 = 5.0


def _erfcx64(x):
    """erfc(x) * exp(x^2) in float64 (x float64, or float32 where the graph's storage
    policy computes float64 in 32 bits: the TPU's 64-bit rule)."""
    # in float32 the direct form fails from x ~ 9 (erfc(x) is subnormal there, which a TPU
    # flushes to 0, and exp(x^2) overflows: 0 * inf) and is already 25 * 2^-24 off at x = 5
    # from rounding x^2, where the continued fraction is 2.2e-7 off
    cf_from = _ERFCX_CF_FROM if x.dtype == jnp.float64 else _ERFCX_CF_FROM_FLOAT32
    xx = x * x
    direct = jnp.exp(xx) * lax.erfc(jnp.minimum(x, cf_from))
    cf = _ISPI * (xx * (xx + 4.5) + 2) / (x * (xx * (xx + 5) + 3.75))
    tail = jnp.where(x > 5e7, _ISPI / x, cf)  # 1-term expansion: xx overflows
    return jnp.where(x > cf_from, tail, direct)


@register(prims.erfcx.default, aten.special_erfcx.default)
def _erfcx(ctx, x):
    (x,) = as_compute(ctx, x)
    return _erfcx64(x.astype(jnp.float64))


@register(aten.special_log_ndtr.default)
def _log_ndtr(ctx, x):
    """Eager's branches: log(erfcx(-t) / 2) - t^2 below -1, log1p(-erfc(t) / 2) above."""
    (x,) = as_compute(ctx, x)
    t = x.astype(jnp.float64) * np.sqrt(0.5)
    low = jnp.log(_erfcx64(-t) / 2) - t * t
    high = jnp.log1p(-lax.erfc(t) / 2)
    return jnp.where(x < -1, low, high)


# Euler-Maclaurin correction coefficients (2k)! / B_2k of eager's (Cephes') zeta
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042e-16


def _zeta64(x, q, settled):
    """Eager's Hurwitz zeta step by step in float64: direct terms (q + k)^-x until
    q + k > 9 and k >= 9 or a term is negligible (a while loop as long as the
    furthest element needs: q = -1000.5 takes 1010 steps, as in eager), then up to
    12 Euler-Maclaurin terms. `settled` marks elements whose value the caller sets."""
    s = jnp.power(q, -x)

    def active(i, a, done):
        return ~done & ((i < 9) | (a <= 9))

    def direct_step(state):
        i, a, b, s, done = state
        on = active(i, a, done)
        a = jnp.where(on, a + 1, a)
        b = jnp.where(on, jnp.power(a, -x), b)
        s = jnp.where(on, s + b, s)
        done = done | (on & (-_MACHEP * s < b) & (b < _MACHEP * s))
        return i + 1, a, b, s, done

    _, a, b, s, direct_done = lax.while_loop(
        lambda st: jnp.any(active(st[0], st[1], st[4])), direct_step,
        (0, q, jnp.zeros_like(s), s, settled))
    w = a
    tail = s + b * w / (x - 1) - 0.5 * b
    a, k = jnp.ones_like(s), 0.0
    converged = jnp.zeros(s.shape, bool)
    for coef in _ZETA_A:
        a = a * (x + k)
        b = b / w
        t = a * b / coef
        tail = jnp.where(converged, tail, tail + t)
        converged = converged | (jnp.abs(t / tail) < _MACHEP)
        a = a * (x + k + 1)
        b = b / w
        k += 2
    return jnp.where(direct_done, s, tail)


@register(prims.zeta.default, aten.special_zeta.default)
def _zeta(ctx, x, q):
    x, q = (v.astype(jnp.float64) for v in as_compute(ctx, x, q))
    x, q = jnp.broadcast_arrays(x, q)
    # eager's early returns, in its order: a pole at x = 1, NaN below, then for q <= 0
    # a pole at integer q and NaN for a non-integer x
    pole_q = (q <= 0) & (q == jnp.floor(q))
    nan_q = (q <= 0) & (x != jnp.floor(x))
    early = jnp.where(x == 1, jnp.inf, jnp.where((x < 1) | (~pole_q & nan_q), jnp.nan, jnp.inf))
    settled = (x <= 1) | pole_q | nan_q
    return jnp.where(settled, early, _zeta64(x, q, settled))
