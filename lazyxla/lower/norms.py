"""Layer, batch and group normalization with their backward formulas, each one
node (PyTorch's decompositions trace a dozen ops per call). Statistics are
computed in float32 for float16/bfloat16 inputs, like eager CPU.

Batch norm in training updates the running statistics in place, but
`native_batch_norm`'s schema does not say so; a lazyxla decomposition
(frontend/decompositions.py) routes it (and `_native_batch_norm_legit`) to the
functional `_native_batch_norm_legit_functional` node and copies the new
statistics into the module's buffers. PyTorch updates running_var with the unbiased
variance and normalizes with the biased one.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import opmath
from .registry import register

aten = torch.ops.aten


def _f(x):
    """x in its compute dtype (float32 for half types)."""
    return x.astype(opmath(x.dtype))


def _masked(ctx, outs):
    """None for outputs the caller did not ask for (output_mask)."""
    return tuple(o if d is not None else None for o, d in zip(outs, ctx.jdtype))


# -- layer norm ----------------------------------------------------------------------

@register(aten.native_layer_norm.default)
def _layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = _f(x)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    xc = xf - mean
    rstd = lax.rsqrt(jnp.mean(xc * xc, axis=axes, keepdims=True) + jnp.asarray(eps, xf.dtype))
    out = xc * rstd
    if weight is not None:
        out = out * _f(weight)
    if bias is not None:
        out = out + _f(bias)
    return out, mean.reshape(ctx.shape[1]), rstd.reshape(ctx.shape[2])


@register(aten.native_layer_norm_backward.default)
def _layer_norm_backward(ctx, grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    inner = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    outer = tuple(range(x.ndim - len(normalized_shape)))
    dy, xf = _f(grad), _f(x)
    mean = _f(mean).reshape(x.shape[:len(outer)] + (1,) * len(inner))
    rstd = _f(rstd).reshape(mean.shape)
    xhat = (xf - mean) * rstd
    g = dy * _f(weight) if weight is not None else dy
    dx = dw = db = None
    if output_mask[0]:
        dx = rstd * (g - jnp.mean(g, axis=inner, keepdims=True)
                     - xhat * jnp.mean(g * xhat, axis=inner, keepdims=True))
    if output_mask[1] and weight is not None:
        dw = jnp.sum(dy * xhat, axis=outer)
    if output_mask[2] and bias is not None:
        db = jnp.sum(dy, axis=outer)
    return _masked(ctx, (dx, dw, db))


# -- batch norm ------------------------------------------------------------------------

def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _affine(xhat, x, weight, bias):
    if weight is not None:
        xhat = xhat * _f(weight).reshape(_channel_shape(x))
    if bias is not None:
        xhat = xhat + _f(bias).reshape(_channel_shape(x))
    return xhat


def _batch_stats(x, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    xf = _f(x)
    mean = jnp.mean(xf, axis=axes)
    xc = xf - mean.reshape(_channel_shape(x))
    var = jnp.mean(xc * xc, axis=axes)
    invstd = lax.rsqrt(var + jnp.asarray(eps, xf.dtype))
    return xc * invstd.reshape(_channel_shape(x)), mean, var, invstd


def _eval_norm(x, weight, bias, running_mean, running_var, eps):
    xf = _f(x)
    invstd = lax.rsqrt(_f(running_var) + jnp.asarray(eps, xf.dtype))
    xhat = (xf - _f(running_mean).reshape(_channel_shape(x))) * invstd.reshape(_channel_shape(x))
    return _affine(xhat, x, weight, bias)


@register(aten._native_batch_norm_legit_functional.default)
def _bn_functional(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        out = _eval_norm(x, weight, bias, running_mean, running_var, eps)
        unused = jnp.zeros(ctx.shape[1], jnp.float32)  # eval saves no statistics
        return out, unused, unused, running_mean, running_var
    xhat, mean, var, invstd = _batch_stats(x, eps)
    n = x.size // x.shape[1]
    rm, rv = _f(running_mean), _f(running_var)
    m = jnp.asarray(momentum, rm.dtype)
    unbiased = var * (n / max(n - 1, 1))
    new_mean = (1 - m) * rm + m * mean
    new_var = (1 - m) * rv + m * unbiased
    return _affine(xhat, x, weight, bias), mean, invstd, new_mean, new_var


@register(aten._native_batch_norm_legit.no_stats)
def _bn_no_stats(ctx, x, weight, bias, training, momentum, eps):
    xhat, mean, _, invstd = _batch_stats(x, eps)
    return _affine(xhat, x, weight, bias), mean, invstd


@register(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
    out = _eval_norm(x, weight, bias, running_mean, running_var, eps)
    return out, jnp.zeros(ctx.shape[1], jnp.float32), jnp.zeros(ctx.shape[2], jnp.float32)


def _bn_backward(ctx, grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                 output_mask):
    axes = (0,) + tuple(range(2, x.ndim))
    cs = _channel_shape(x)
    dy, xf = _f(grad), _f(x)
    if train:
        mean, invstd = _f(save_mean), _f(save_invstd)
    else:
        mean = _f(running_mean)
        invstd = lax.rsqrt(_f(running_var) + jnp.asarray(eps, xf.dtype))
    xhat = (xf - mean.reshape(cs)) * invstd.reshape(cs)
    sum_dy = jnp.sum(dy, axis=axes)
    sum_dy_xhat = jnp.sum(dy * xhat, axis=axes)
    w = _f(weight).reshape(cs) if weight is not None else jnp.ones((), xf.dtype)
    dx = dw = db = None
    if output_mask[0]:
        scale = w * invstd.reshape(cs)
        if train:
            n = x.size // x.shape[1]
            dx = scale * (dy - (sum_dy / n).reshape(cs) - xhat * (sum_dy_xhat / n).reshape(cs))
        else:
            dx = dy * scale
    if output_mask[1]:
        dw = sum_dy_xhat
    if output_mask[2]:
        db = sum_dy
    return _masked(ctx, (dx, dw, db))


@register(aten.native_batch_norm_backward.default)
def _native_bn_backward(ctx, grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask):
    return _bn_backward(ctx, grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask)


@register(aten.batch_norm_backward.default)
def _bn_backward_reserve(ctx, grad, x, weight, running_mean, running_var, save_mean, save_var, update, eps,
                         output_mask, reserve):
    return _bn_backward(ctx, grad, x, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask)


# -- group norm --------------------------------------------------------------------------

@register(aten.native_group_norm.default)
def _group_norm(ctx, x, weight, bias, n, c, hxw, group, eps):
    xf = _f(x).reshape(n, group, -1)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    xc = xf - mean
    rstd = lax.rsqrt(jnp.mean(xc * xc, axis=-1, keepdims=True) + jnp.asarray(eps, xf.dtype))
    out = (xc * rstd).reshape(n, c, hxw)
    if weight is not None:
        out = out * _f(weight)[None, :, None]
    if bias is not None:
        out = out + _f(bias)[None, :, None]
    return out.reshape(x.shape), mean.reshape(n, group), rstd.reshape(n, group)


@register(aten.native_group_norm_backward.default)
def _group_norm_backward(ctx, grad, x, mean, rstd, weight, n, c, hxw, group, output_mask):
    dy = _f(grad).reshape(n, c, hxw)
    mean = _f(mean).reshape(n, group, 1)
    rstd = _f(rstd).reshape(n, group, 1)
    xhat = (_f(x).reshape(n, group, -1) - mean) * rstd
    g = dy * _f(weight)[None, :, None] if weight is not None else dy
    g = g.reshape(n, group, -1)
    dx = dw = db = None
    if output_mask[0]:
        dx = rstd * (g - jnp.mean(g, axis=-1, keepdims=True) - xhat * jnp.mean(g * xhat, axis=-1, keepdims=True))
        dx = dx.reshape(x.shape)
    if output_mask[1]:
        dw = jnp.sum(dy * xhat.reshape(n, c, hxw), axis=(0, 2))
    if output_mask[2]:
        db = jnp.sum(dy, axis=(0, 2))
    return _masked(ctx, (dx, dw, db))
