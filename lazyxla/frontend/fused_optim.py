"""torch.optim's fused kernels (`Adam/AdamW/SGD(fused=True)`) as lazyxla decompositions.

A fused optimizer makes one `_fused_adam_` / `_fused_adamw_` / `_fused_sgd_` call per
device and dtype. Traced, it is one more set of elementwise nodes in the step's graph.
It matters most under `torch.amp.GradScaler`: a fused optimizer sets
`_step_supports_amp_scaling`, so `GradScaler.step` passes it `grad_scale` and
`found_inf` instead of reading found_inf on the host; the unscale and the skip of an
inf/NaN step then happen inside the graph, and a scaled training step is one graph.

Semantics of ATen's CPU kernels (aten/src/ATen/native/cpu/Fused{Adam,SGD}Kernel.cpp):
when found_inf is 1 nothing changes, not even the gradients; otherwise each gradient
is divided by grad_scale and written back, then the update runs in the opmath type
(float32 for 16-bit parameters) with Adam's bias corrections taken in float64 from
the step tensor. Results agree with the CPU kernels to rounding (they use FMAs).
"""
from __future__ import annotations

import torch

from ..ir.ops import registrar

aten = torch.ops.aten
register_decomposition = registrar("decomposition")
_OPMATH = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _as(x, dtype):
    return x if x.dtype == dtype else aten._to_copy(x, dtype=dtype)


def _unscaled(grad, grad_scale, opmath):
    g = _as(grad, opmath)
    return g if grad_scale is None else aten.div.Tensor(g, _as(grad_scale, opmath))


def _skip(found_inf):
    return None if found_inf is None else aten.eq.Scalar(found_inf, 1.0)


def _write(pairs, skip) -> None:
    """target <- value for each pair, unless `skip` (found_inf == 1): then all keep theirs."""
    for target, value in pairs:
        value = _as(value, target.dtype)
        if skip is not None:
            value = aten.where.self(skip, target, value)
        aten.copy_(target, value)


def _start(p, grad, grad_scale, maximize: bool) -> tuple:
    """What every fused kernel does first for one parameter: (opmath dtype, the unscaled
    and maybe negated gradient, the parameter in opmath, the writes so far: the
    unscaled gradient goes back into .grad when GradScaler passed its scale)."""
    om = _OPMATH.get(p.dtype, p.dtype)
    g = _unscaled(grad, grad_scale, om)
    pairs = [] if grad_scale is None else [(grad, g)]
    if maximize:
        g = aten.neg(g)
    return om, g, _as(p, om), pairs


def _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1: float,
          beta2: float, weight_decay: float, eps: float, amsgrad: bool, maximize: bool, grad_scale=None,
          found_inf=None, decoupled: bool) -> None:
    skip = _skip(found_inf)
    for i, p in enumerate(params):
        om, g, param, pairs = _start(p, grads[i], grad_scale, maximize)
        if weight_decay != 0:
            if decoupled:   # AdamW: param *= 1 - lr * weight_decay
                decay = (aten.rsub.Scalar(aten.mul.Scalar(_as(lr, torch.float64), weight_decay), 1)
                         if isinstance(lr, torch.Tensor) else 1 - lr * weight_decay)
                param = aten.mul.Tensor(param, _as(decay, om)) if isinstance(decay, torch.Tensor) \
                    else aten.mul.Scalar(param, decay)
            else:
                g = aten.add.Tensor(g, aten.mul.Scalar(param, weight_decay))
        step = _as(state_steps[i], torch.float64)
        bias_correction1 = aten.rsub.Scalar(aten.pow.Scalar(beta1, step), 1)
        bias_correction2_sqrt = aten.sqrt(aten.rsub.Scalar(aten.pow.Scalar(beta2, step), 1))
        lr64 = _as(lr, torch.float64) if isinstance(lr, torch.Tensor) else lr
        step_size = (aten.div.Tensor(lr64, bias_correction1) if isinstance(lr64, torch.Tensor)
                     else aten.mul.Scalar(aten.reciprocal(bias_correction1), lr64))
        exp_avg = aten.lerp.Scalar(_as(exp_avgs[i], om), g, 1 - beta1)
        exp_avg_sq = aten.add.Tensor(aten.mul.Scalar(_as(exp_avg_sqs[i], om), beta2),
                                     aten.mul.Tensor(aten.mul.Scalar(g, 1 - beta2), g))
        pairs += [(exp_avgs[i], exp_avg), (exp_avg_sqs[i], exp_avg_sq)]
        second = exp_avg_sq
        if amsgrad:
            second = aten.maximum(_as(max_exp_avg_sqs[i], om), exp_avg_sq)
            pairs.append((max_exp_avg_sqs[i], second))
        denom = aten.add.Scalar(aten.div.Tensor(aten.sqrt(second), _as(bias_correction2_sqrt, om)), eps)
        update = aten.div.Tensor(aten.mul.Tensor(exp_avg, _as(aten.neg(step_size), om)), denom)
        pairs.append((p, aten.add.Tensor(param, update)))
        _write(pairs, skip)


@register_decomposition(aten._fused_adam_.default, aten._fused_adam_.tensor_lr)
def _fused_adam_(*args, **kwargs) -> None:
    _adam(*args, **kwargs, decoupled=False)


@register_decomposition(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr)
def _fused_adamw_(*args, **kwargs) -> None:
    _adam(*args, **kwargs, decoupled=True)


@register_decomposition(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
def _fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay: float, momentum: float, lr,
                dampening: float, nesterov: bool, maximize: bool, is_first_step: bool, grad_scale=None,
                found_inf=None) -> None:
    skip = _skip(found_inf)
    for i, p in enumerate(params):
        om, g, param, pairs = _start(p, grads[i], grad_scale, maximize)
        if weight_decay != 0:
            g = aten.add.Tensor(g, aten.mul.Scalar(param, weight_decay))
        if momentum != 0:
            buf = g if is_first_step else aten.add.Tensor(
                aten.mul.Scalar(_as(momentum_buffer_list[i], om), momentum), aten.mul.Scalar(g, 1 - dampening))
            pairs.append((momentum_buffer_list[i], buf))
            g = aten.add.Tensor(g, aten.mul.Scalar(buf, momentum)) if nesterov else buf
        step = aten.mul.Tensor(g, _as(aten.neg(lr), om)) if isinstance(lr, torch.Tensor) \
            else aten.mul.Scalar(g, -lr)
        pairs.append((p, aten.add.Tensor(param, step)))
        _write(pairs, skip)
