"""torch.optim's fused kernels (`Adam/AdamW/SGD(fused=True)`): each call one IR node.

A fused optimizer makes one `_fused_adam_` / `_fused_adamw_` / `_fused_sgd_` call per
device and dtype, over all its parameters. The handler here records it as one node,
FUSED_ADAM or FUSED_SGD (ir/fused.py says what it writes, lower/fused_optim.py computes
it), and writes the node's outputs into the parameters, the optimizer state and (under
GradScaler) the gradients: one traced op per call, whatever the number of parameters.

It matters most under `torch.amp.GradScaler`: a fused optimizer sets
`_step_supports_amp_scaling`, so `GradScaler.step` passes it `grad_scale` and
`found_inf` instead of reading found_inf on the host; the unscale and the skip of an
inf/NaN step then happen inside the graph, and a scaled training step is one graph.

The floats the kernel's callers would compute on the host (1 - beta1, 1 - lr *
weight_decay, ...) are computed here and lifted, like every float option, so a changing
learning rate never changes the graph; an option of 0 that turns a term off (weight
decay, momentum) is left out of the node, as the kernels skip that term.

Design: docs/design.md, "Fused optimizers: one node per call".
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from ..ir.build import getitem_node, op_node, scalar_node
from ..ir.fused import written
from ..ir.node import FUSED_ADAM, FUSED_SGD, Node
from ..ir.ops import register_fact
from .primitives import check_no_internal_overlap
from .tensor import LazyTensor
from .tracing import DeviceMismatchError, lift_scalar

aten = torch.ops.aten


def _node(t: Any, what: str) -> Node:
    if isinstance(t, LazyTensor):
        return t.checked_value()
    raise DeviceMismatchError(f"lazyxla: a fused optimizer got a {getattr(t, 'device', type(t).__name__)} "
                              f"tensor among its {what}; expected all tensors on the lazyxla device")


def _nodes(tensors: Sequence, what: str) -> tuple:
    return tuple([_node(t, what) for t in tensors])


def _tensor_operand(t: Optional[torch.Tensor], what: str) -> Optional[Node]:
    """A tensor option (lr, grad_scale, found_inf): its node; a one-element CPU tensor, as
    the tracer takes one, a runtime scalar of its value and dtype."""
    if t is None or isinstance(t, LazyTensor):
        return None if t is None else t.checked_value()
    if t.numel() == 1 and t.is_cpu:
        return scalar_node(t.item(), t.dtype)
    return _node(t, what)


def _lr_operand(lr: Any) -> tuple[Node, bool]:
    """(lr's operand, whether lr is a tensor)."""
    return (_tensor_operand(lr, "lr"), True) if isinstance(lr, torch.Tensor) else (lift_scalar(lr), False)


def _record(op: str, tensor_args: tuple, kwargs: dict) -> None:
    """One node computing the update, its outputs written into the tensors it updates
    (every check first: a refused call writes nothing)."""
    args = tuple(_nodes(group, "tensors") for group in tensor_args)
    updated = written(op, tensor_args, kwargs)
    for tensor in updated:
        if tensor._view is not None:
            check_no_internal_overlap(tensor)
    targets = written(op, args, kwargs)
    node = op_node(op, args, kwargs, tuple(t.shape for t in targets), tuple(t.dtype for t in targets),
                   len(targets))
    for i, tensor in enumerate(updated):
        tensor.write(getitem_node(node, i))


def _check_lengths(name: str, params: Sequence, **lists: Sequence) -> None:
    """Every list the kernel reads holds one tensor per parameter, as its CPU kernel checks."""
    for what, tensors in lists.items():
        if len(tensors) != len(params):
            raise RuntimeError(f"lazyxla: {name}: {len(params)} parameters but {len(tensors)} {what}")


def _fused_adam_(func, info, args, kwargs) -> None:
    _adam(*args, **kwargs, decoupled=False)


def _fused_adamw_(func, info, args, kwargs) -> None:
    _adam(*args, **kwargs, decoupled=True)


def _fused_sgd_(func, info, args, kwargs) -> None:
    _sgd(*args, **kwargs)


def _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1: float, beta2: float,
          weight_decay: float, eps: float, amsgrad: bool, maximize: bool, grad_scale=None, found_inf=None,
          decoupled: bool) -> None:
    _check_lengths("_fused_adam_", params, grads=grads, exp_avgs=exp_avgs, exp_avg_sqs=exp_avg_sqs,
                   state_steps=state_steps, max_exp_avg_sqs=max_exp_avg_sqs if amsgrad else params)
    if not amsgrad and max_exp_avg_sqs:
        raise RuntimeError("lazyxla: _fused_adam_: max_exp_avg_sqs must be empty without amsgrad")
    if not params:
        return
    lr_node, tensor_lr = _lr_operand(lr)
    has_decay = weight_decay != 0
    kwargs = {"lr": lr_node, "beta1": lift_scalar(beta1), "beta2": lift_scalar(beta2),
              "one_minus_beta1": lift_scalar(1 - beta1), "one_minus_beta2": lift_scalar(1 - beta2),
              "eps": lift_scalar(eps), "weight_decay": lift_scalar(weight_decay) if has_decay else None,
              # AdamW's decay factor, as its callers compute it from a float lr
              "decay": lift_scalar(1 - lr * weight_decay) if has_decay and decoupled and not tensor_lr else None,
              "amsgrad": bool(amsgrad), "maximize": bool(maximize), "decoupled": decoupled, "tensor_lr": tensor_lr,
              "grad_scale": _tensor_operand(grad_scale, "grad_scale"),
              "found_inf": _tensor_operand(found_inf, "found_inf")}
    _record(FUSED_ADAM, (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps), kwargs)


def _sgd(params, grads, momentum_buffer_list, *, weight_decay: float, momentum: float, lr, dampening: float,
         nesterov: bool, maximize: bool, is_first_step: bool, grad_scale=None, found_inf=None) -> None:
    has_momentum = momentum != 0
    _check_lengths("_fused_sgd_", params, grads=grads,
                   **({"momentum_buffer_list": momentum_buffer_list} if has_momentum else {}))
    if not params:
        return
    kwargs = {"lr": _lr_operand(lr)[0], "weight_decay": lift_scalar(weight_decay) if weight_decay != 0 else None,
              "momentum": lift_scalar(momentum) if has_momentum else None,
              "one_minus_dampening": lift_scalar(1 - dampening) if has_momentum and not is_first_step else None,
              "nesterov": bool(nesterov), "maximize": bool(maximize), "is_first_step": bool(is_first_step),
              "grad_scale": _tensor_operand(grad_scale, "grad_scale"),
              "found_inf": _tensor_operand(found_inf, "found_inf")}
    _record(FUSED_SGD, (params, grads, momentum_buffer_list if has_momentum else ()), kwargs)


for _op, _handler in ((aten._fused_adam_.default, _fused_adam_), (aten._fused_adam_.tensor_lr, _fused_adam_),
                      (aten._fused_adamw_.default, _fused_adamw_), (aten._fused_adamw_.tensor_lr, _fused_adamw_),
                      (aten._fused_sgd_.default, _fused_sgd_), (aten._fused_sgd_.tensor_lr, _fused_sgd_)):
    register_fact(_op, "special", _handler)
del _op, _handler
