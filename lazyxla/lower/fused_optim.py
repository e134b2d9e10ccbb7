"""Lowering of the fused optimizer updates (FUSED_ADAM, FUSED_SGD; ir/fused.py): one
rule computes a whole `_fused_adam(w)_` / `_fused_sgd_` call.

Values are those of ATen's CPU kernels (aten/src/ATen/native/cpu/Fused{Adam,SGD}Kernel.cpp),
to rounding (they use FMAs): when found_inf is 1 nothing changes, not even the gradients;
otherwise each gradient is divided by grad_scale (and written back), then the update runs
in the opmath type (float32 for 16-bit parameters), with Adam's bias corrections taken in
float64 from the step tensor. Each step below is the lax form the lowering rule of the
named ATen op emits (elementwise.py), so the values equal those of a graph made of those
ops. "float64" is the type the graph holds float64 in: the dtype the lifted float
scalars arrive in, float32 under a storage policy that narrows float64
(runtime/storage_dtypes.py). Scalars the kernel's callers compute on the host
(1 - beta1, 1 - lr * weight_decay, ...) arrive computed there, lifted.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..ir.fused import written
from ..ir.node import FUSED_ADAM, FUSED_SGD
from ._util import binary, cast, opmath, where
from .registry import register


def _mul(x, y):
    return binary(lax.mul, x, y)


def _add(x, y):
    return binary(lax.add, x, y)


def _div(x, y):
    return binary(lax.div, x, y)


def _start(p, grad, grad_scale, maximize: bool) -> tuple:
    """(opmath dtype, the unscaled and maybe negated gradient, the unscaled gradient (the
    value written back into .grad under GradScaler), the parameter in opmath)."""
    om = opmath(p.dtype)
    g = cast(grad, om)
    if grad_scale is not None:
        g = _div(g, cast(grad_scale, om))
    unscaled = g
    if maximize:
        g = lax.neg(g)
    return om, g, unscaled, cast(p, om)


def _finish(old: list, new: list, found_inf) -> tuple:
    """Each new value in its tensor's dtype; all keep their old values where found_inf is 1."""
    out = [cast(n, o.dtype) for o, n in zip(old, new)]
    if found_inf is None:
        return tuple(out)
    skip = lax.eq(found_inf, cast(1, found_inf.dtype))
    return tuple(where(skip, o, n) for o, n in zip(old, out))


def _lerp(x, end, weight):
    # elementwise.py `_lerp`, eager's formula
    diff = end - x
    return jnp.where(jnp.abs(weight) < 0.5, x + weight * diff, end - diff * (1 - weight))


@register(FUSED_ADAM)
def _fused_adam(ctx, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                one_minus_beta1, one_minus_beta2, eps, weight_decay, decay, amsgrad: bool, maximize: bool,
                decoupled: bool, tensor_lr: bool, grad_scale, found_inf) -> tuple:
    wide = beta1.dtype   # float64 as this graph holds it
    one = cast(1, wide)
    new_params, new_grads, new_avgs, new_sqs, new_maxes = [], [], [], [], []
    for i, p in enumerate(params):
        om, g, unscaled, param = _start(p, grads[i], grad_scale, maximize)
        new_grads.append(unscaled)
        if weight_decay is not None:
            if decoupled:   # AdamW: param *= 1 - lr * weight_decay
                factor = decay if decay is not None else lax.sub(one, lax.mul(cast(lr, wide), cast(weight_decay, wide)))
                param = _mul(param, cast(factor, om))
            else:
                g = _add(g, _mul(param, cast(weight_decay, om)))
        step = cast(state_steps[i], wide)
        bias_correction1 = lax.sub(one, jnp.power(cast(beta1, wide), step))
        bias_correction2_sqrt = lax.sqrt(lax.sub(one, jnp.power(cast(beta2, wide), step)))
        step_size = (_div(cast(lr, wide), bias_correction1) if tensor_lr
                     else _mul(jnp.reciprocal(bias_correction1), cast(lr, wide)))
        exp_avg = _lerp(cast(exp_avgs[i], om), g, cast(one_minus_beta1, om))
        exp_avg_sq = _add(_mul(cast(exp_avg_sqs[i], om), cast(beta2, om)),
                          _mul(_mul(g, cast(one_minus_beta2, om)), g))
        second = exp_avg_sq
        if amsgrad:
            second = jnp.maximum(cast(max_exp_avg_sqs[i], om), exp_avg_sq)
            new_maxes.append(second)
        denom = _add(_div(lax.sqrt(second), cast(bias_correction2_sqrt, om)), cast(eps, om))
        update = _div(_mul(exp_avg, cast(lax.neg(step_size), om)), denom)
        new_params.append(_add(param, update))
        new_avgs.append(exp_avg)
        new_sqs.append(exp_avg_sq)
    options = {"amsgrad": amsgrad, "grad_scale": grad_scale}
    args = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps)
    return _finish(written(FUSED_ADAM, args, options),
                   written(FUSED_ADAM, (new_params, new_grads, new_avgs, new_sqs, new_maxes, ()), options), found_inf)


@register(FUSED_SGD)
def _fused_sgd(ctx, params, grads, momentum_buffers, *, lr, weight_decay, momentum, one_minus_dampening,
               nesterov: bool, maximize: bool, is_first_step: bool, grad_scale, found_inf) -> tuple:
    new_params, new_grads, new_buffers = [], [], []
    for i, p in enumerate(params):
        om, g, unscaled, param = _start(p, grads[i], grad_scale, maximize)
        new_grads.append(unscaled)
        if weight_decay is not None:
            g = _add(g, _mul(param, cast(weight_decay, om)))
        if momentum is not None:
            buf = g if is_first_step else _add(_mul(cast(momentum_buffers[i], om), cast(momentum, om)),
                                               _mul(g, cast(one_minus_dampening, om)))
            new_buffers.append(buf)
            g = _add(g, _mul(buf, cast(momentum, om))) if nesterov else buf
        new_params.append(_add(param, _mul(g, cast(lax.neg(lr), om))))
    options = {"momentum": momentum, "grad_scale": grad_scale}
    return _finish(written(FUSED_SGD, (params, grads, momentum_buffers), options),
                   written(FUSED_SGD, (new_params, new_grads, new_buffers), options), found_inf)
