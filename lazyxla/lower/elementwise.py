"""Pointwise ops: arithmetic, math functions, comparisons, activations and their
backward formulas. Arithmetic computes in the node's dtype (float32 for
float16/bfloat16, like eager CPU); comparisons in the operands' common dtype."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ._util import _kind, as_compute, binary, cast, cast_all, casts_to_compute, common_dtype, exact_div, where
from .registry import register

aten = torch.ops.aten


def digamma(x):
    # lax.digamma(+-0) is nan; eager gives the pole's one-sided limit: -inf at +0, +inf at -0.
    return jnp.where(x == 0, -jnp.copysign(jnp.inf, x), lax.digamma(x))


def sign(x):
    """torch.sign: eager's (0 < x) - (x < 0), so nan gives 0 (jnp.sign gives nan)."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.sign(x)
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def sgn(x):
    """torch.sgn: sign for real x; for complex, what eager's CPU kernels compute: 0 where
    |z| == 0, else z scaled by s = 1/|z|. complex128 multiplies both parts by s
    (3+4j -> 0.6000000000000001+0.8j; other finite values within an ulp of eager's, whose
    own result for an infinite part differs between its vector loop and scalar tail).
    complex64 divides by |z| + 0j as its vectorized complex division does (both operands
    scaled by s, then (a c + b d, b c - a d) / (c^2 + d^2)), so an infinite part gives
    nan+nanj. Plain z / |z| differs from both in these cases."""
    if not jnp.iscomplexobj(x):
        return sign(x)
    re, im = jnp.real(x), jnp.imag(x)
    mag = jnp.abs(x)
    scale = 1 / mag
    a, b = re * scale, im * scale
    if x.dtype == jnp.complex128:
        out = lax.complex(a, b)
    else:
        c, d = mag * scale, jnp.zeros_like(mag) * scale
        den = c * c + d * d
        out = lax.complex((a * c + b * d) / den, (b * c - a * d) / den)
    return jnp.where(mag == 0, jnp.zeros((), x.dtype), out)


def _unary(fn):
    fast = _LAX_UNARY.get(fn)

    def rule(ctx, x, *args, **kwargs):
        (x,) = as_compute(ctx, x)
        if fast is not None and _kind(x.dtype) in "fc":
            return fast(x)
        return fn(x)
    return rule


# jnp functions that, on a float or complex array, are exactly one lax primitive
# (their bodies: lax.<op>(*promote_args_inexact(x))): called directly, they skip
# tracing jnp's jitted wrapper (see _util.py).
_LAX_UNARY = {
    jnp.negative: lax.neg, jnp.exp: lax.exp, jnp.log: lax.log, jnp.sqrt: lax.sqrt,
    jnp.sin: lax.sin, jnp.cos: lax.cos, jnp.tan: lax.tan, jnp.tanh: lax.tanh,
    jnp.log1p: lax.log1p, jnp.expm1: lax.expm1, jnp.arcsin: lax.asin, jnp.arccos: lax.acos,
    jnp.arctan: lax.atan, jnp.sinh: lax.sinh, jnp.cosh: lax.cosh, jnp.arcsinh: lax.asinh,
    jnp.arctanh: lax.atanh, jax.nn.sigmoid: lax.logistic,
    # jax.nn's bodies, without their jit (silu's is not inlined: a nested function)
    jax.nn.silu: lambda x: lax.mul(x, lax.logistic(x)),
    jax.nn.relu: lambda x: lax.max(x, lax.full_like(x, 0)),
}


def _zero(x):
    return lax.full_like(x, 0)


_UNARY = {
    aten.neg.default: jnp.negative, aten.exp.default: jnp.exp, aten.log.default: jnp.log,
    aten.sqrt.default: jnp.sqrt, aten.rsqrt.default: lax.rsqrt, aten.sin.default: jnp.sin,
    aten.cos.default: jnp.cos, aten.tan.default: jnp.tan, aten.tanh.default: jnp.tanh,
    aten.sigmoid.default: jax.nn.sigmoid, aten.relu.default: jax.nn.relu,
    aten.erf.default: lax.erf, aten.erfinv.default: lax.erf_inv, aten.log1p.default: jnp.log1p,
    aten.expm1.default: jnp.expm1, aten.reciprocal.default: jnp.reciprocal,
    aten.floor.default: jnp.floor, aten.ceil.default: jnp.ceil, aten.round.default: jnp.round,
    aten.trunc.default: jnp.trunc, aten.sign.default: sign, aten.sgn.default: sgn,
    aten.log2.default: jnp.log2, aten.log10.default: jnp.log10, aten.exp2.default: jnp.exp2,
    aten.asin.default: jnp.arcsin, aten.acos.default: jnp.arccos, aten.atan.default: jnp.arctan,
    aten.sinh.default: jnp.sinh, aten.cosh.default: jnp.cosh, aten.asinh.default: jnp.arcsinh,
    aten.acosh.default: jnp.arccosh, aten.atanh.default: jnp.arctanh,
    aten.silu.default: jax.nn.silu, aten.mish.default: lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    aten.frac.default: lambda x: x - jnp.trunc(x), aten.square.default: jnp.square,
    aten.hardsigmoid.default: lambda x: jnp.clip(x / 6 + 0.5, 0, 1),
    aten.hardswish.default: lambda x: x * jnp.clip(x / 6 + 0.5, 0, 1),
    aten.lgamma.default: lax.lgamma, aten.digamma.default: digamma,
}
for _op, _fn in _UNARY.items():
    register(_op)(_unary(_fn))


# unary ops applied to the input as it comes, not cast to the output's compute dtype first:
# abs of a complex number and the predicates (bool results) must see the input's own values
_AS_IS = {aten.abs.default: jnp.abs, aten.logical_not.default: jnp.logical_not, aten.isnan.default: jnp.isnan,
          aten.isinf.default: jnp.isinf, aten.isfinite.default: jnp.isfinite}
for _op, _fn in _AS_IS.items():
    register(_op)(lambda ctx, x, _fn=_fn: _fn(x))


@register(aten.bitwise_not.default)
def _bitwise_not(ctx, x):
    return jnp.logical_not(x) if x.dtype == jnp.bool_ else jnp.bitwise_not(x)


def _binary(fn):
    def rule(ctx, x, y, *args, **kwargs):
        x, y = as_compute(ctx, x, y)
        return fn(x, y)
    return rule


def _add_scaled(ctx, prim, x, y, alpha):
    """prim(x, y * alpha) in the compute dtype, in lax primitives (bool, where jnp's +
    is a logical or, keeps jnp). A Python alpha of 1 on a real dtype is left out:
    y * 1 is y exactly there (not for complex, where it can turn inf into nan)."""
    if ctx.jdtype == jnp.bool_:
        x, y, alpha = as_compute(ctx, x, y, alpha)
        return (x + y * alpha) if prim is lax.add else (x - y * alpha)
    x, y = as_compute(ctx, x, y)
    if not (type(alpha) in (int, float) and alpha == 1 and _kind(x.dtype) != "c"):
        (alpha,) = as_compute(ctx, alpha)
        y = binary(lax.mul, y, alpha)
    return binary(prim, x, y)


def _scaled_rule(name: str, prim, reversed_operands: bool):
    """add / sub (x prim y * alpha), or rsub (y - x * alpha) with `reversed_operands`; named
    `name` in this module, as lx.debug.explain_op shows it."""
    @casts_to_compute
    def rule(ctx, x, y, alpha=1):
        return _add_scaled(ctx, prim, *((y, x) if reversed_operands else (x, y)), alpha)
    rule.__name__ = rule.__qualname__ = name
    return rule


_add = register(aten.add.Tensor, aten.add.Scalar)(_scaled_rule("_add", lax.add, False))
_sub = register(aten.sub.Tensor, aten.sub.Scalar)(_scaled_rule("_sub", lax.sub, False))
_rsub = register(aten.rsub.Tensor, aten.rsub.Scalar)(_scaled_rule("_rsub", lax.sub, True))


@register(aten.mul.Tensor, aten.mul.Scalar)
@casts_to_compute
def _mul(ctx, x, y):
    if ctx.dtype == torch.bool:
        return jnp.logical_and(x, y)
    x, y = as_compute(ctx, x, y)
    return binary(lax.mul, x, y)


@register(aten.div.Tensor, aten.div.Scalar)
@casts_to_compute
def _div(ctx, x, y):
    x, y = as_compute(ctx, x, y)
    return binary(lax.div, x, y) if _kind(x.dtype) in "fc" else x / y


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx, x, y, rounding_mode=None):
    if rounding_mode is None:
        x, y = as_compute(ctx, x, y)
        return x / y
    x, y = as_compute(ctx, x, y)
    if rounding_mode == "floor":
        # Python's floor division, as eager's: (x - fmod(x, y)) / y rounded to the nearest
        # integer, so 1.0 // 0.1 is 9 (floor(1.0 / 0.1) would be 10); a zero takes the
        # sign of x / y
        q = jnp.floor_divide(x, y)
        return q if jnp.issubdtype(q.dtype, jnp.integer) else jnp.where(q == 0, jnp.copysign(0, x / y), q)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return lax.div(*jnp.broadcast_arrays(x, y))  # C-style truncation; lax does not broadcast
    return jnp.trunc(exact_div(x, y))  # trunc(5.125 / 5.125) must be 1


@register(aten.remainder.Tensor, aten.remainder.Scalar)
def _remainder(ctx, x, y):
    x, y = as_compute(ctx, x, y)
    return jnp.remainder(x, y)


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(ctx, x, y):
    x, y = as_compute(ctx, x, y)
    return jnp.fmod(x, y)


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(ctx, x, y):
    if isinstance(y, (int, float)) and not isinstance(y, bool):
        (x,) = as_compute(ctx, x)
        if y == 2:
            return x * x
        if y == 0.5:
            return jnp.sqrt(x)
        if float(y).is_integer() and jnp.issubdtype(x.dtype, jnp.floating):
            return lax.integer_pow(x, int(y))
        return jnp.power(x, jnp.asarray(y, x.dtype))
    x, y = as_compute(ctx, x, y)
    if jnp.issubdtype(x.dtype, jnp.signedinteger):  # (unsigned exponents are never negative)
        return _int_pow(x, y)
    return jnp.power(x, y)


def _int_pow(x, y):
    """Integer x ** y with eager's answer for negative exponents (jnp.power returns
    garbage there): 1 for base 1, ±1 for base -1 by the exponent's parity, else 0."""
    one = jnp.ones((), x.dtype)
    neg = jnp.where(x == 1, one, jnp.where(x == -1, jnp.where(y % 2 == 0, one, -one), 0))
    return jnp.where(y < 0, neg, jnp.power(x, jnp.maximum(y, 0)))


for _op, _fn in {
    aten.maximum.default: jnp.maximum, aten.minimum.default: jnp.minimum,
    aten.fmax.default: jnp.fmax, aten.fmin.default: jnp.fmin, aten.atan2.default: jnp.arctan2,
    aten.hypot.default: jnp.hypot, aten.copysign.Tensor: jnp.copysign,
    aten.xlogy.Tensor: jax.scipy.special.xlogy,
}.items():
    register(_op)(_binary(_fn))


def _compare(fn):
    def rule(ctx, x, y):
        return fn(*cast_all(common_dtype(x, y), x, y))
    return rule


for _ops, _fn in {
    (aten.eq.Tensor, aten.eq.Scalar): jnp.equal, (aten.ne.Tensor, aten.ne.Scalar): jnp.not_equal,
    (aten.lt.Tensor, aten.lt.Scalar): jnp.less, (aten.le.Tensor, aten.le.Scalar): jnp.less_equal,
    (aten.gt.Tensor, aten.gt.Scalar): jnp.greater, (aten.ge.Tensor, aten.ge.Scalar): jnp.greater_equal,
    (aten.logical_and.default,): jnp.logical_and, (aten.logical_or.default,): jnp.logical_or,
    (aten.logical_xor.default,): jnp.logical_xor,
}.items():
    register(*_ops)(_compare(_fn))


def _bitwise(fn, logical):
    def rule(ctx, x, y):
        dt = common_dtype(x, y)
        x, y = cast_all(dt, x, y)
        return logical(x, y) if dt == jnp.bool_ else fn(x, y)
    return rule


register(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_bitwise(jnp.bitwise_and, jnp.logical_and))
register(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_bitwise(jnp.bitwise_or, jnp.logical_or))
register(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)(_bitwise(jnp.bitwise_xor, jnp.logical_xor))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx, cond, x, y):
    x, y = as_compute(ctx, x, y)
    return where(cond, x, y) if cond.dtype == jnp.bool_ else jnp.where(cond, x, y)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, x, mask, value):
    if mask.dtype != jnp.bool_:
        return jnp.where(mask, jnp.asarray(value).astype(x.dtype), x)
    return where(mask, cast(value, x.dtype), x)


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx, x, min=None, max=None):
    (x,) = as_compute(ctx, x)
    if min is not None:
        x = binary(lax.max, x, cast(min, x.dtype))
    if max is not None:
        x = binary(lax.min, x, cast(max, x.dtype))
    return x


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(ctx, x, min):
    x, m = as_compute(ctx, x, min)
    return binary(lax.max, x, m)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(ctx, x, max):
    x, m = as_compute(ctx, x, max)
    return binary(lax.min, x, m)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx, x, end, weight):
    # eager's formula (ATen's lerp kernel): from the nearer end, so weight 1 gives `end`
    # exactly, and NaN/inf operands give what eager gives (weight 1 with an infinite end
    # is NaN there, as inf - inf * 0)
    x, end, weight = as_compute(ctx, x, end, weight)
    diff = end - x
    return jnp.where(jnp.abs(weight) < 0.5, x + weight * diff, end - diff * (1 - weight))


@register(aten.addcmul.default)
def _addcmul(ctx, x, t1, t2, value=1):
    x, t1, t2, value = as_compute(ctx, x, t1, t2, value)
    return x + value * t1 * t2


@register(aten.addcdiv.default)
def _addcdiv(ctx, x, t1, t2, value=1):
    x, t1, t2, value = as_compute(ctx, x, t1, t2, value)
    return x + value * (t1 / t2)


@register(aten.gelu.default)
def _gelu(ctx, x, approximate="none"):
    (x,) = as_compute(ctx, x)
    return jax.nn.gelu(x, approximate=approximate == "tanh")


@register(aten.gelu_backward.default)
def _gelu_backward(ctx, grad, x, approximate="none"):
    grad, x = as_compute(ctx, grad, x)
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)   # Python floats: no float64 ops in the graph (the TPU has none)
        inner = k * (x + 0.044715 * x ** 3)
        t = jnp.tanh(inner)
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
        return grad * d
    cdf = 0.5 * (1 + lax.erf(x / math.sqrt(2.0)))
    pdf = jnp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return grad * (cdf + x * pdf)


@register(aten.threshold_backward.default)
def _threshold_backward(ctx, grad, x, threshold):
    grad, x, threshold = as_compute(ctx, grad, x, threshold)
    return where(lax.le(x, threshold), _zero(grad), grad)


@register(aten.threshold.default)
def _threshold(ctx, x, threshold, value):
    x, threshold, value = as_compute(ctx, x, threshold, value)
    return where(lax.le(x, threshold), value, x)


# Complex: autograd's convention is grad * conj(derivative), as eager's kernels do.
@register(aten.sigmoid_backward.default)
def _sigmoid_backward(ctx, grad, y):
    grad, y = as_compute(ctx, grad, y)
    return grad * jnp.conj(y * (1 - y))


@register(aten.tanh_backward.default)
def _tanh_backward(ctx, grad, y):
    grad, y = as_compute(ctx, grad, y)
    return grad * jnp.conj(1 - y * y)


@register(aten.silu_backward.default)
def _silu_backward(ctx, grad, x):
    grad, x = as_compute(ctx, grad, x)
    s = jax.nn.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


@register(aten.leaky_relu.default)
def _leaky_relu(ctx, x, slope=0.01):
    x, slope = as_compute(ctx, x, slope)
    return where(lax.gt(x, _zero(x)), x, lax.mul(x, slope))


@register(aten.leaky_relu_backward.default)
def _leaky_relu_backward(ctx, grad, x, slope, self_is_result):
    grad, x, slope = as_compute(ctx, grad, x, slope)
    return where(lax.gt(x, _zero(x)), grad, binary(lax.mul, grad, slope))


@register(aten.hardtanh.default)
def _hardtanh(ctx, x, min_val=-1, max_val=1):
    x, lo, hi = as_compute(ctx, x, min_val, max_val)
    return lax.min(hi, lax.max(lo, x))   # jnp.clip's order of operands


@register(aten.hardtanh_backward.default)
def _hardtanh_backward(ctx, grad, x, min_val, max_val):
    grad, x, lo, hi = as_compute(ctx, grad, x, min_val, max_val)
    return where(lax.bitwise_or(lax.le(x, lo), lax.ge(x, hi)), _zero(grad), grad)


@register(aten.elu.default)
def _elu(ctx, x, alpha=1, scale=1, input_scale=1):
    x, alpha, scale, input_scale = as_compute(ctx, x, alpha, scale, input_scale)
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(x * input_scale))


@register(aten.softplus.default)
def _softplus(ctx, x, beta=1, threshold=20):
    x, beta, threshold = as_compute(ctx, x, beta, threshold)
    bx = x * beta
    return jnp.where(bx > threshold, x, jnp.log1p(jnp.exp(bx)) / beta)


@register(aten.nan_to_num.default)
def _nan_to_num(ctx, x, nan=None, posinf=None, neginf=None):
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)
