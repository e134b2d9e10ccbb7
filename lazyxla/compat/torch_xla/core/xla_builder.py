"""`torch_xla.core.xla_builder` (xb): `call_jax` and the op builder, on `lx.call_jax`.

Upstream builds XLA computations op by op through its C++ bridge. Here an `Op`
wraps a JAX value (an array, or a tuple of values for XLA tuples) while a
computation is traced: `create_computation(name, fn, shapes)` returns a
`Computation`, a JAX function that calls `fn` on `Op` parameters, and
`xla_computation_as_func` / `xla_op_registry.Op` run it on lazy tensors with
`lx.call_jax`, so it fuses into the step graph like any op. Builder methods
upstream offers and lazyxla does not map (convolutions, gather/scatter, windowed
reductions, sort, map, dynamic dimensions) raise `UnsupportedError` naming them.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import torch
from jax import lax

import lazyxla as lx

from ...unsupported import refuse, unsupported_names


class Type:
    F32 = 'f32'
    F64 = 'f64'
    BF16 = 'bf16'
    F16 = 'f16'
    U8 = 'u8'
    S8 = 's8'
    U16 = 'u16'
    S16 = 's16'
    U32 = 'u32'
    S32 = 's32'
    U64 = 'u64'
    S64 = 's64'
    C64 = 'c64'
    C128 = 'c128'
    PRED = 'pred'


_XLA_PT_TYPE_MAP = {
    Type.F32: torch.float32, Type.F64: torch.float64, Type.BF16: torch.bfloat16, Type.F16: torch.float16,
    Type.U8: torch.uint8, Type.S8: torch.int8, Type.U16: torch.uint16, Type.S16: torch.int16,
    Type.U32: torch.uint32, Type.S32: torch.int32, Type.U64: torch.uint64, Type.S64: torch.int64,
    Type.C64: torch.complex64, Type.C128: torch.complex128, Type.PRED: torch.bool,
}
_PT_XLA_TYPE_MAP = {v: k for k, v in _XLA_PT_TYPE_MAP.items()}
_XLA_JAX = {
    Type.F32: jnp.float32, Type.F64: jnp.float64, Type.BF16: jnp.bfloat16, Type.F16: jnp.float16,
    Type.U8: jnp.uint8, Type.S8: jnp.int8, Type.U16: jnp.uint16, Type.S16: jnp.int16,
    Type.U32: jnp.uint32, Type.S32: jnp.int32, Type.U64: jnp.uint64, Type.S64: jnp.int64,
    Type.C64: jnp.complex64, Type.C128: jnp.complex128, Type.PRED: jnp.bool_,
}
_JAX_XLA = {jnp.dtype(v): k for k, v in _XLA_JAX.items()}


def _jax_type(xla_type: Optional[str]):
    return _XLA_JAX[xla_type or Type.F32]


class Shape:
    """An XLA shape as upstream's dict: {'type': 'f32', 'sizes': (2, 3)}, or a list of those."""

    def __init__(self, shape: Any) -> None:
        self._shape = shape

    @classmethod
    def create(cls, dtype: str, sizes: Sequence[int], dynamic_dimensions=None) -> "Shape":
        if dynamic_dimensions is not None:
            refuse("torch_xla.core.xla_builder.Shape.create(dynamic_dimensions=...)",
                   "lazyxla compiles static shapes only")
        return Shape({'type': str(dtype), 'sizes': tuple(sizes)})

    @property
    def shape(self) -> Any:
        return self._shape

    def is_tuple(self) -> bool:
        return isinstance(self._shape, (list, tuple))

    def tuple_size(self) -> int:
        return len(self._shape)

    def tuple_shape(self, index: int) -> Any:
        return self._shape[index]

    def is_dynamic(self) -> bool:
        return False

    def as_scalar(self) -> "Shape":
        return Shape.create(self.dtype, ())

    @property
    def rank(self) -> int:
        return len(self._shape['sizes'])

    @property
    def sizes(self) -> tuple:
        return self._shape['sizes']

    @property
    def dynamic_dimensions(self) -> None:
        return None

    @property
    def dtype(self) -> str:
        return self._shape['type']


def _shape_of(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_shape_of(v) for v in value]
    return {'type': _JAX_XLA[jnp.dtype(value.dtype)], 'sizes': tuple(value.shape)}


class Builder:
    """Stands for upstream's XlaBuilder: a name; operations hold their JAX values themselves."""

    def __init__(self, name: str) -> None:
        self.name = name


_BUILDER = Builder("lazyxla")


def _unary(fn: Callable) -> Callable:
    return lambda self: Op(fn(self.op))


def _binary(fn: Callable) -> Callable:
    return lambda self, rhs: Op(fn(self.op, rhs.op))


class Op:
    """An operation being traced into a computation: `op` is its JAX value (an array, or
    a tuple for an XLA tuple). The methods follow upstream's `xb.Op`."""

    def __init__(self, op: Any) -> None:
        self.op = op

    def shape(self) -> Shape:
        return Shape(_shape_of(self.op))

    def builder(self) -> Builder:
        return _BUILDER

    def build(self, name: str) -> "Computation":
        refuse("torch_xla.core.xla_builder.Op.build", "use xb.create_computation(name, fn, shapes)")

    __add__, __sub__, __mul__ = _binary(lax.add), _binary(lax.sub), _binary(lax.mul)
    __matmul__, __truediv__, __pow__ = _binary(jnp.matmul), _binary(lax.div), _binary(lax.pow)
    __mod__, __and__, __or__, __xor__ = _binary(lax.rem), _binary(lax.bitwise_and), _binary(lax.bitwise_or), \
        _binary(lax.bitwise_xor)
    __eq__, __ne__, __le__ = _binary(lax.eq), _binary(lax.ne), _binary(lax.le)
    __lt__, __ge__, __gt__ = _binary(lax.lt), _binary(lax.ge), _binary(lax.gt)
    __lshift__, __rshift__ = _binary(lax.shift_left), _binary(lax.shift_right_arithmetic)
    __neg__, __not__ = _unary(lax.neg), _unary(lax.bitwise_not)
    __hash__ = object.__hash__
    acos, asin, atan, ceil, cos, cosh = (_unary(f) for f in (lax.acos, lax.asin, lax.atan, lax.ceil, lax.cos,
                                                             lax.cosh))
    erf, erfc, erfinf, exp, expm1, floor = (_unary(f) for f in (lax.erf, lax.erfc, lax.erf_inv, lax.exp,
                                                                lax.expm1, lax.floor))
    log, log1p, sqrt, real, imag, clz = (_unary(f) for f in (lax.log, lax.log1p, lax.sqrt, lax.real, lax.imag,
                                                             lax.clz))
    conj, rsqrt, sin, sinh, tan, tanh = (_unary(f) for f in (lax.conj, lax.rsqrt, lax.sin, lax.sinh, lax.tan,
                                                             lax.tanh))
    atan2, max, min = _binary(lax.atan2), _binary(lax.max), _binary(lax.min)

    def reshape(self, sizes, dimensions=None, inferred_dimension=None) -> "Op":
        value = self.op if dimensions is None else lax.transpose(self.op, tuple(dimensions))
        return Op(lax.reshape(value, tuple(sizes)))

    def broadcast(self, sizes) -> "Op":
        return Op(lax.broadcast(self.op, tuple(sizes)))

    def broadcast_in_dim(self, sizes, dimensions) -> "Op":
        return Op(lax.broadcast_in_dim(self.op, tuple(sizes), tuple(dimensions)))

    def slice(self, start_indices, limit_indices, strides=None) -> "Op":
        return Op(lax.slice(self.op, tuple(start_indices), tuple(limit_indices),
                            None if strides is None else tuple(strides)))

    def slice_in_dim(self, start_index, limit_index, dimno, stride=1) -> "Op":
        return Op(lax.slice_in_dim(self.op, start_index, limit_index, stride, dimno))

    def dynamic_slice(self, start_indices, slice_sizes) -> "Op":
        return Op(lax.dynamic_slice(self.op, [i.op for i in start_indices], tuple(slice_sizes)))

    def dynamic_update_slice(self, update, start_indices) -> "Op":
        return Op(lax.dynamic_update_slice(self.op, update.op, [i.op for i in start_indices]))

    def cast(self, to_type: str) -> "Op":
        return Op(lax.convert_element_type(self.op, _jax_type(to_type)))

    def bitcast(self, to_type: str) -> "Op":
        return Op(lax.bitcast_convert_type(self.op, _jax_type(to_type)))

    def pad(self, value, config) -> "Op":
        return Op(lax.pad(self.op, value.op, [tuple(c) for c in config]))

    def select(self, true_value, false_value) -> "Op":
        return Op(lax.select(self.op, true_value.op, false_value.op))

    def transpose(self, permutation) -> "Op":
        return Op(lax.transpose(self.op, tuple(permutation)))

    def triangualr_solve(self, b, left_side, lower, unit_diagonal, transpose_a) -> "Op":
        # (sic) upstream's spelling; self is the triangular matrix A
        return Op(lax.linalg.triangular_solve(self.op, b.op, left_side=left_side, lower=lower,
                                              transpose_a=transpose_a, unit_diagonal=unit_diagonal))

    triangular_solve = triangualr_solve

    def clamp(self, min_value, max_value) -> "Op":
        return Op(lax.clamp(min_value.op, self.op, max_value.op))

    def get_tuple_element(self, index: int) -> "Op":
        return Op(self.op[index])

    def rev(self, dimensions) -> "Op":
        return Op(lax.rev(self.op, tuple(dimensions)))

    def reduce(self, init_value, computation, dimensions) -> "Op":
        body = _as_binary(computation)
        return Op(lax.reduce(self.op, init_value.op, body, tuple(dimensions)))

    def reduce_all(self, init_value, computation) -> "Op":
        return self.reduce(init_value, computation, range(self.op.ndim))

    def conditional(self, true_operand, false_operand, true_computation, false_computation) -> "Op":
        t_fn = _as_function(true_computation, unpack=False)
        f_fn = _as_function(false_computation, unpack=False)
        return Op(lax.cond(self.op, lambda ops: t_fn(ops[0]), lambda ops: f_fn(ops[1]),
                           (true_operand.op, false_operand.op)))

    def mkconditional(self, ops, true_fn, false_fn, **kwargs) -> "Op":
        operands = tuple(o.op for o in ops)
        return Op(lax.cond(self.op, _as_function(true_fn), _as_function(false_fn), operands))

    def while_loop(self, condition_computation, body_computation) -> "Op":
        cond, body = _as_function(condition_computation), _as_function(body_computation)
        return Op(lax.while_loop(cond, body, self.op))

    @classmethod
    def mkwhile(cls, ops, condition_fn, body_fn, **kwargs) -> "Op":
        return Op.tuple(ops).while_loop(condition_fn, body_fn)

    def get_dimension_size(self, dimension: int) -> "Op":
        return Op(jnp.int32(self.op.shape[dimension]))

    def scalar_like(self, value) -> "Op":
        return Op(jnp.full(self.op.shape, value, self.op.dtype))

    def zeros_like(self) -> "Op":
        return self.scalar_like(0)

    def ones_like(self) -> "Op":
        return self.scalar_like(1)

    @classmethod
    def tuple(cls, ops, builder=None) -> "Op":
        return Op(tuple(o.op for o in ops))

    @classmethod
    def concat_in_dim(cls, ops, dimension, builder=None) -> "Op":
        return Op(lax.concatenate([o.op for o in ops], dimension))

    @classmethod
    def call(cls, computation, ops, builder=None) -> "Op":
        return Op(_as_function(computation, unpack=False)(tuple(o.op for o in ops)))

    @classmethod
    def constant(cls, builder, value) -> "Op":
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            return Op(jnp.asarray(value.numpy(), _jax_type(_PT_XLA_TYPE_MAP[value.dtype])))
        return Op(jnp.asarray(value))

    @classmethod
    def scalar(cls, builder, value, dtype=None) -> "Op":
        return Op(jnp.asarray(value, _jax_type(dtype)))

    @classmethod
    def zero(cls, builder, dtype=None) -> "Op":
        return cls.scalar(builder, 0, dtype=dtype)

    @classmethod
    def one(cls, builder, dtype=None) -> "Op":
        return cls.scalar(builder, 1, dtype=dtype)

    @classmethod
    def iota(cls, builder, shape, iota_dimension) -> "Op":
        s = shape if isinstance(shape, Shape) else Shape(shape)
        return Op(lax.broadcasted_iota(_jax_type(s.dtype), s.sizes, iota_dimension))

    @classmethod
    def to_torch_type(cls, dtype: Optional[str]) -> torch.dtype:
        return _XLA_PT_TYPE_MAP[dtype] if dtype else torch.float32

    @classmethod
    def from_torch_type(cls, dtype: torch.dtype) -> str:
        return _PT_XLA_TYPE_MAP[dtype]

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        refuse(f"torch_xla.core.xla_builder.Op.{name}",
               "write the computation as a JAX function and call it with xb.call_jax")


def _unwrap(result: Any) -> Any:
    if isinstance(result, Op):
        return result.op
    if isinstance(result, (tuple, list)):
        return tuple(_unwrap(r) for r in result)
    return result


def _as_function(fn: Any, unpack: bool = True) -> Callable:
    """A JAX function over the loop/branch operand (a tuple) from an Op-level function or a
    Computation, as upstream's `Op.wrap_function`: a tuple argument is spread into the
    function's parameters, a tuple/list result becomes a tuple."""
    if isinstance(fn, Computation):
        return lambda value: fn(*value) if isinstance(value, tuple) else fn(value)

    def run(value):
        args = [Op(v) for v in value] if unpack and isinstance(value, tuple) else [Op(value)]
        return _unwrap(fn(*args))
    return run


def _as_binary(computation: Any) -> Callable:
    if isinstance(computation, Computation):
        return computation
    return lambda a, b: _unwrap(computation(Op(a), Op(b)))


class Computation:
    """A computation built by `create_computation`: a JAX function of its parameters."""

    def __init__(self, name: str, fn: Callable, shapes: Sequence[Shape], kwargs: dict) -> None:
        self.name = name
        self._fn = fn
        self.shapes = list(shapes)
        self._kwargs = kwargs
        self.__name__ = name

    def __call__(self, *arrays):
        return _unwrap(self._fn(*[Op(a) for a in arrays], **self._kwargs))


def create_builder(name: str) -> Builder:
    return Builder(name)


def mkshape(dtype: str, sizes: Sequence[int], dynamic_dimensions=None) -> Shape:
    return Shape.create(dtype, sizes, dynamic_dimensions=dynamic_dimensions)


def tensor_shape(tensor, device: str = '') -> Any:
    if isinstance(tensor, (list, tuple)):
        return [tensor_shape(t) for t in tensor]
    return Shape.create(_PT_XLA_TYPE_MAP[tensor.dtype], tuple(tensor.shape))


def create_computation(name: str, fn: Callable, shapes: Sequence[Shape], **kwargs) -> Computation:
    return Computation(name, fn, shapes, kwargs)


def get_computation_hlo(computation: Computation) -> str:
    structs = [jax.ShapeDtypeStruct(s.sizes, _jax_type(s.dtype)) for s in computation.shapes]
    return jax.jit(computation).lower(*structs).as_text()


def xla_computation_as_func(computation: Computation, name: Optional[str] = None) -> Callable:
    """`fn(input_tensors) -> list of lazy tensors`, the computation run by `lx.call_jax`."""
    def fn(input_tensors):
        result = lx.call_jax(computation, *input_tensors)
        return list(result) if isinstance(result, tuple) else [result]
    return fn


def call_jax(jax_func: Callable, args: tuple, kwargs: Optional[dict] = None, name: Optional[str] = None,
             override_hash: Any = None) -> Any:
    """Upstream's `xb.call_jax`: `jax_func(*args, **kwargs)` on lazy tensors (`lx.call_jax`).
    The cache is keyed on the function object itself, so `override_hash` is not needed."""
    return lx.call_jax(jax_func, *args, **(kwargs or {}))


__getattr__ = unsupported_names(__name__)
