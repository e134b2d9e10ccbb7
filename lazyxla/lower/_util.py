"""Helpers shared by lowering rules: dtype promotion, dims."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

_LOW_PRECISION = (jnp.float16, jnp.bfloat16)


def opmath(jdtype):
    """Dtype to compute in: float16/bfloat16 compute in float32 (as eager CPU does)."""
    return jnp.float32 if jdtype in _LOW_PRECISION else jdtype


def stepwise_rounding(jdtype):
    """A function rounding a compute-dtype value to `jdtype` (identity where jdtype is its
    own compute dtype): for eager kernels that do arithmetic in bfloat16/float16 itself,
    rounding at every step. An explicit `reduce_precision`, which XLA keeps, where
    plain bf16 arithmetic may be fused and kept in float32 between ops."""
    if opmath(jdtype) == jdtype:
        return lambda v: v
    info = jnp.finfo(jdtype)
    return lambda v: lax.reduce_precision(v, info.nexp, info.nmant)


def as_compute(ctx, *xs):
    """Cast every operand to the node's compute dtype (arithmetic ops)."""
    return cast_all(opmath(ctx.jdtype), *xs)


def cast_all(dt, *xs):
    """Every operand (array or Python scalar) as an array of dtype `dt`."""
    return tuple(jnp.asarray(x, dt) if _is_big_int(x) else jnp.asarray(x).astype(dt) for x in xs)


def _is_big_int(x) -> bool:
    """A Python int beyond int64 (a uint64 constant, see frontend/tracing.py): it has
    no default JAX dtype, so it converts straight to the wanted one."""
    return type(x) is int and not -2**63 <= x < 2**63


def _category(dt) -> int:
    if dt == jnp.bool_:
        return 0
    if jnp.issubdtype(dt, jnp.integer):
        return 1
    return 3 if jnp.issubdtype(dt, jnp.complexfloating) else 2


def common_dtype(*xs):
    """PyTorch-style promotion of operands where 0-d values (scalars) weigh less."""
    arrays = [jnp.asarray(x, jnp.uint64) if _is_big_int(x) else jnp.asarray(x) for x in xs]
    dimensioned = [a.dtype for a in arrays if a.ndim > 0]
    zero_d = [a.dtype for a in arrays if a.ndim == 0]
    if not dimensioned:
        return jnp.result_type(*zero_d)
    dt = jnp.result_type(*dimensioned)
    high = [z for z in zero_d if _category(z) > _category(dt)]
    if high:
        top = max(_category(z) for z in high)
        # the default type of the scalars' kind; a complex scalar keeps a float64 tensor's precision
        dt = {1: jnp.int64, 2: jnp.float32, 3: jnp.complex128 if dt == jnp.float64 else jnp.complex64}[top]
        # lifted Python scalars arrive as float64 / int64 / complex128 and do not widen
        same = [z for z in high if _category(z) == top and z not in (jnp.float64, jnp.int64, jnp.complex128)]
        if same:
            dt = jnp.result_type(*same)
    return dt


def norm_dims(dims, ndim: int):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(d + ndim if d < 0 else d for d in dims) if ndim else ()


def exact_div(v, d):
    """v / d correctly rounded, as eager divides. XLA rewrites a division by a constant
    or a broadcast divisor into a multiplication by its reciprocal, an ulp off for about
    a third of values (5.125 / 5.125 = 0.99999994): harmless for `/`, which keeps the
    fast form, but an off-by-one after trunc / floor and a drift in long recurrences.
    A full-shape divisor behind a barrier keeps the division."""
    v, d = jnp.broadcast_arrays(v, d)
    return v / lax.optimization_barrier(d)
