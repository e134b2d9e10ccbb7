"""Reductions, softmax family, cumulative ops, sorting."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ._util import norm_dims, opmath
from .registry import register

aten = torch.ops.aten


def _acc(ctx, x):
    """Accumulate in the output's compute type (int sums in int64, like PyTorch)."""
    return x.astype(opmath(ctx.jdtype))


@register(aten.sum.default, aten.sum.dim_IntList)
def _sum(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return jnp.sum(_acc(ctx, x), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.mean.default, aten.mean.dim)
def _mean(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return jnp.mean(_acc(ctx, x), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.prod.default, aten.prod.dim_int)
def _prod(ctx, x, dim=None, keepdim=False, *, dtype=None):
    return jnp.prod(_acc(ctx, x), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.amax.default)
def _amax(ctx, x, dim=(), keepdim=False):
    return jnp.max(x, axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.amin.default)
def _amin(ctx, x, dim=(), keepdim=False):
    return jnp.min(x, axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.max.default)
def _max_all(ctx, x):
    return jnp.max(x)


@register(aten.min.default)
def _min_all(ctx, x):
    return jnp.min(x)


@register(aten.max.dim)
def _max_dim(ctx, x, dim, keepdim=False):
    dim = norm_dims(dim, x.ndim)[0] if x.ndim else None
    return jnp.max(x, axis=dim, keepdims=keepdim), jnp.argmax(x, axis=dim, keepdims=keepdim)


@register(aten.min.dim)
def _min_dim(ctx, x, dim, keepdim=False):
    dim = norm_dims(dim, x.ndim)[0] if x.ndim else None
    return jnp.min(x, axis=dim, keepdims=keepdim), jnp.argmin(x, axis=dim, keepdims=keepdim)


@register(aten.argmax.default)
def _argmax(ctx, x, dim=None, keepdim=False):
    if dim is None:
        return jnp.argmax(jnp.reshape(x, (-1,))).reshape(ctx.shape)
    return jnp.argmax(x, axis=norm_dims(dim, x.ndim)[0] if x.ndim else None, keepdims=keepdim)


@register(aten.argmin.default)
def _argmin(ctx, x, dim=None, keepdim=False):
    if dim is None:
        return jnp.argmin(jnp.reshape(x, (-1,))).reshape(ctx.shape)
    return jnp.argmin(x, axis=norm_dims(dim, x.ndim)[0] if x.ndim else None, keepdims=keepdim)


@register(aten.any.default, aten.any.dim, aten.any.dims)
def _any(ctx, x, dim=None, keepdim=False):
    return jnp.any(x, axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.all.default, aten.all.dim, aten.all.dims)
def _all(ctx, x, dim=None, keepdim=False):
    return jnp.all(x, axis=norm_dims(dim, x.ndim), keepdims=keepdim)


def _correction(correction, unbiased):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _stat_input(real_out, x):
    """x in the compute type of a statistic whose (variance) output is `real_out`: a
    complex input stays complex (its variance is the mean of |x - mean|^2, real)."""
    dt = opmath(real_out)
    if jnp.iscomplexobj(x):
        dt = jnp.complex128 if dt == jnp.float64 else jnp.complex64
    return x.astype(dt)


@register(aten.var.correction, aten.var.dim)
def _var(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(unbiased, bool) or unbiased is None:
        ddof = _correction(correction, unbiased)
    else:
        ddof = 1
    return jnp.var(_stat_input(ctx.jdtype, x), axis=norm_dims(dim, x.ndim), ddof=ddof, keepdims=keepdim)


@register(aten.std.correction, aten.std.dim)
def _std(ctx, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    ddof = _correction(correction, unbiased if isinstance(unbiased, bool) else None)
    return jnp.std(_stat_input(ctx.jdtype, x), axis=norm_dims(dim, x.ndim), ddof=ddof, keepdims=keepdim)


@register(aten.var_mean.correction)
def _var_mean(ctx, x, dim=None, *, correction=None, keepdim=False):
    xa = _stat_input(ctx.jdtype[0], x)
    axes = norm_dims(dim, x.ndim)
    ddof = 1 if correction is None else correction
    return jnp.var(xa, axis=axes, ddof=ddof, keepdims=keepdim), jnp.mean(xa, axis=axes, keepdims=keepdim)


@register(aten.logsumexp.default)
def _logsumexp(ctx, x, dim, keepdim=False):
    return jax.nn.logsumexp(_acc(ctx, x), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.linalg_vector_norm.default)
def _vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    xa = _acc(ctx, jnp.abs(x))  # abs first: a complex input's output dtype is real
    axes = norm_dims(dim, x.ndim)
    if ord == float("inf"):
        return jnp.max(xa, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(xa, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum((xa != 0).astype(xa.dtype), axis=axes, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(xa, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(xa * xa, axis=axes, keepdims=keepdim))
    return jnp.sum(xa ** ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)


def _over_1d(rule):
    """A rule along `dim` that also takes 0-d operands (eager treats them as 1 element)."""
    def run(ctx, *arrays_and_dim):
        *arrays, dim = arrays_and_dim
        if arrays[0].ndim == 0:
            return rule(ctx, *(a.reshape(1) for a in arrays), 0).reshape(())
        return rule(ctx, *arrays, dim)
    return run


@register(aten._softmax.default)
def _softmax(ctx, x, dim, half_to_float=False):
    return _over_1d(lambda c, x, d: jax.nn.softmax(_acc(c, x), axis=d))(ctx, x, dim)


@register(aten._log_softmax.default)
def _log_softmax(ctx, x, dim, half_to_float=False):
    return _over_1d(lambda c, x, d: jax.nn.log_softmax(_acc(c, x), axis=d))(ctx, x, dim)


def _softmax_grad(ctx, grad, y, dim):
    grad, y = _acc(ctx, grad), _acc(ctx, y)
    return y * (grad - jnp.sum(grad * y, axis=dim, keepdims=True))


def _log_softmax_grad(ctx, grad, y, dim):
    grad, y = _acc(ctx, grad), _acc(ctx, y)
    return grad - jnp.exp(y) * jnp.sum(grad, axis=dim, keepdims=True)


@register(aten._softmax_backward_data.default)
def _softmax_backward(ctx, grad, y, dim, input_dtype):
    return _over_1d(_softmax_grad)(ctx, grad, y, dim)


@register(aten._log_softmax_backward_data.default)
def _log_softmax_backward(ctx, grad, y, dim, input_dtype):
    return _over_1d(_log_softmax_grad)(ctx, grad, y, dim)


@register(aten.cumsum.default)
def _cumsum(ctx, x, dim, *, dtype=None):
    return _scan(jnp.cumsum, ctx, x, dim)


@register(aten.cumprod.default)
def _cumprod(ctx, x, dim, *, dtype=None):
    return _scan(jnp.cumprod, ctx, x, dim)


def _scan(fn, ctx, x, dim):
    """A cumulative op along `dim`; eager accepts dim 0 / -1 on a 0-d tensor (a scan of
    one element: the identity), where jnp raises."""
    x = _acc(ctx, x)
    return x if x.ndim == 0 else fn(x, axis=dim)


@register(aten.sort.default, aten.sort.stable)
def _sort(ctx, x, dim=-1, descending=False, *, stable=None):
    if isinstance(dim, bool) or dim is None:  # sort.stable(self, *, stable, dim, descending)
        dim = -1
    dim = dim + x.ndim if dim < 0 else dim
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    iota = lax.broadcasted_iota(jnp.int64, x.shape, dim)
    key = -x if descending and not jnp.issubdtype(x.dtype, jnp.unsignedinteger) and x.dtype != jnp.bool_ else x
    if descending and x.dtype == jnp.bool_:
        key = ~x
    _, values_idx = lax.sort((key, iota), dimension=dim, num_keys=1, is_stable=True)
    return jnp.take_along_axis(x, values_idx, axis=dim), values_idx


@register(aten.topk.default)
def _topk(ctx, x, k, dim=-1, largest=True, sorted=True):
    if x.ndim == 0:
        return jnp.broadcast_to(x, ctx.shape[0]), jnp.zeros(ctx.shape[1], jnp.int64)
    dim = dim + x.ndim if dim < 0 else dim
    xm = jnp.moveaxis(x, dim, -1)
    if largest:
        vals, idx = lax.top_k(xm, k)
    else:
        vals, idx = lax.top_k(-xm, k)
        vals = -vals
    return jnp.moveaxis(vals, -1, dim), jnp.moveaxis(idx.astype(jnp.int64), -1, dim)


@register(aten.hash_tensor.default)
def _hash_tensor(ctx, x, dim=(), keepdim=False, *, mode=0):
    # mode 0, eager's only one: each element widened to its 64-bit type (float64 for
    # floats, int64 for integers and bool) and its bits xor-reduced as uint64
    wide = jnp.float64 if jnp.issubdtype(x.dtype, jnp.floating) else jnp.int64
    bits = lax.bitcast_convert_type(x.astype(wide), jnp.uint64)
    return jnp.bitwise_xor.reduce(bits, axis=norm_dims(dim, x.ndim), keepdims=keepdim)
