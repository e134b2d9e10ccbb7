"""Upstream's patched `nn.Linear` forward (`xs.xla_patched_nn_linear_forward`) and the
helper that installs it (`torch_xla.distributed.fsdp.utils.apply_xla_patch_to_nn_linear`).

The patched forward is an autograd Function whose forward and backward are einsums over
the input's leading dimensions, never flattening them: `torch.matmul` folds a 3-D input
into 2-D with reshapes that hide sharded dimensions from XLA's sharding propagation,
and its backward holds the flattened input rather than the weight. Values and
gradients are those of `F.linear`."""
from __future__ import annotations

from types import MethodType
from typing import Any, Callable, Optional

import torch


class XLAPatchedLinear(torch.autograd.Function):
    """`F.linear(input, weight, bias)` with einsum forward and backward."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        ctx.save_for_backward(input, weight, bias)
        out = torch.einsum("...n,mn->...m", input, weight)
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = torch.einsum("...m,mn->...n", grad_output, weight)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.einsum("...m,...n->mn", grad_output, input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = torch.einsum("...m->m", grad_output)
        return grad_input, grad_weight, grad_bias


def xla_patched_nn_linear_forward(m: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


def apply_xla_patch_to_nn_linear(module: torch.nn.Module,
                                 patched_function: Callable = xla_patched_nn_linear_forward) -> torch.nn.Module:
    """Every `nn.Linear` in `module` (itself included) runs `patched_function(m, input)`
    as its forward, unless its forward was already replaced by other means (left as
    it is, as upstream). Returns `module`."""
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            forward = getattr(m, "forward", None)
            if getattr(forward, "__func__", None) is torch.nn.Linear.forward:
                m._nn_linear_forward_original = forward
                m.forward = MethodType(patched_function, m)
    return module
