"""Helpers shared by lowering rules: dtype promotion, dims, and cheap forms of
jnp's casts, broadcasting binary ops and `where`.

Why the cheap forms: most jnp functions are jitted helpers. Inside the trace of a
graph's program each call is traced as a function of its own (a few hundred µs
of Python per call), and the ones jitted without `inline=True` (`jnp.where`,
`jnp.clip`, `jnp.remainder`, ...) also become a called function in the lowered
module. W4's 2000-op graph made about 3,000 such calls, most of its tracing
time. The forms here emit the lax primitives directly and give the same values
and dtypes as the jnp calls they replace, for the operands rules pass them
(arrays of one dtype, or Python scalars cast first).
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
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


def casts_to_compute(rule):
    """Mark a rule whose first use of every operand is `as_compute` (a cast to
    opmath(ctx.jdtype)). compile/program.py may then hand it packed scalars already
    in that dtype, read from the pack converted once: the same values (the cast is
    then a no-op), and XLA no longer converts each of W4's 1,500 scalars inside its
    one fusion (compile 1.55 -> 1.06 s of CPU for that kernel, measured in plain JAX)."""
    rule.casts_to_compute = True
    return rule


def jax_algorithm(rule):
    """Mark a rule that runs one of JAX's own algorithms (the TPU's SVD, QR, Cholesky, the
    matrix exponential), written for JAX's 32-bit mode. Where the graph holds no 64-bit
    type (the TPU's rule), compile/program.py has it traced and lowered out of x64: under
    x64 their loop counters and constants were 64-bit, and XLA:TPU's compiler aborted the
    process on the SVD's (docs/design.md, "64-bit types on the TPU")."""
    rule.jax_algorithm = True
    return rule


def as_compute(ctx, *xs):
    """Cast every operand to the node's compute dtype (arithmetic ops)."""
    return cast_all(opmath(ctx.jdtype), *xs)


def cast_all(dt, *xs):
    """Every operand (array or Python scalar) as an array of dtype `dt`."""
    return tuple(cast(x, dt) for x in xs)


# What `jnp.asarray` makes of a Python scalar under x64 (lazyxla's mode).
_PY_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: np.dtype(np.float64),
              complex: np.dtype(np.complex128)}


def position_dtype(n: int):
    """The integer dtype of running positions into `n` elements (a mask's cumulative count):
    int32 where they fit, since 64-bit integer math is emulated on the TPU."""
    return jnp.int32 if n < 2 ** 31 else jnp.int64


@functools.lru_cache(maxsize=None)
def _kind(dt) -> str:
    return np.dtype(dt).kind


def cast(x, dt):
    """`x` (array or Python scalar) as an array of dtype `dt`: the value and dtype
    `jnp.asarray(x).astype(dt)` gives, in one lax conversion (a no-op when `x`
    already is a `dt` array). Complex to real keeps the real part, complex to bool
    tests for nonzero, as `astype` does."""
    t = type(x)
    if t in _PY_DTYPES:
        if t is int and not -2**63 <= x < 2**63:
            return jnp.asarray(x, dt)   # a uint64 constant (see _is_big_int)
        if t is complex and _kind(dt) == "c":
            # the constant made in `dt`, rounded part by part as a convert would: a graph
            # without complex128 gets no complex128 constant (see complex_cast)
            return jnp.asarray(np.asarray(x, dt))
        x = np.asarray(x, _PY_DTYPES[t])
    if _kind(x.dtype) == "c":
        if _kind(dt) == "b":
            return lax.ne(x, lax.full_like(x, 0))
        if _kind(dt) != "c":
            x = lax.real(x)
        elif x.dtype != dt:
            return complex_cast(x, dt)
    return lax.convert_element_type(x, dt)


def complex_cast(x, dt):
    """Complex `x` as complex `dt`, part by part: the values of one convert (each part is
    rounded on its own either way), in a form the TPU compiles. Its compiler aborts the
    process on a complex64 <-> complex128 convert ("Unsupported CVT X{64|128} expansion from
    c128[] to f32[]", libtpu 0.0.42), which every complex Python scalar (lifted as
    complex128) meets in a complex64 graph; real, imag and float converts it handles."""
    part = np.finfo(dt).dtype
    return lax.complex(lax.convert_element_type(lax.real(x), part), lax.convert_element_type(lax.imag(x), part))


def binary(prim, x, y):
    """`prim(x, y)` (a lax binary op) for two arrays of one dtype, broadcast as numpy
    broadcasts: lax itself broadcasts 0-d operands and size-1 dimensions, not ranks."""
    nx, ny = x.ndim, y.ndim
    if nx != ny and nx and ny:
        if nx < ny:
            x = lax.broadcast_to_rank(x, ny)
        else:
            y = lax.broadcast_to_rank(y, nx)
    return prim(x, y)


def where(cond, x, y):
    """`jnp.where(cond, x, y)` for a bool array `cond` and arrays `x`, `y` of one dtype."""
    shape = lax.broadcast_shapes(cond.shape, x.shape, y.shape)
    return lax.select(_broadcast_to(cond, shape), _broadcast_to(x, shape), _broadcast_to(y, shape))


def _broadcast_to(x, shape: tuple):
    if x.shape == shape:
        return x
    return lax.broadcast_in_dim(x, shape, tuple(range(len(shape) - x.ndim, len(shape))))


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


def nan_mask(v):
    """Where `v` is NaN: all False for an integer or bool array, which cannot hold one."""
    return jnp.isnan(v) if jnp.issubdtype(v.dtype, jnp.inexact) else jnp.zeros(v.shape, bool)


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
