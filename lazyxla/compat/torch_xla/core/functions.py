"""`torch_xla.core.functions` (xf): the collectives of `xm` with gradients.

`all_reduce(reduce_type, value, scale=1.0, groups=None)` and `all_gather(value, dim=0)`
are `xm.all_reduce` / `xm.all_gather` (one replica per process; between processes
through gloo, docs/compat.md "Collectives between processes") inside autograd
Functions with upstream's backward: the gradient scaled by `scale` for a sum, by
`output / input` for a product, where the input was the extremum for min/max; for
all_gather the slice of this replica. `distributed_mm` and `SyncBatchNorm` are not
mapped."""
from __future__ import annotations

from typing import Any, Optional

import torch

from ...unsupported import unsupported_names
from .. import runtime as xr
from . import xla_model as xm


class AllReduce(torch.autograd.Function):

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, reduce_type: str, scale: float, groups: Optional[list]) -> torch.Tensor:
        ctx.reduce_type, ctx.scale = reduce_type, scale
        output = xm.all_reduce(reduce_type, value, scale=scale, groups=groups)
        ctx.save_for_backward(value, output)
        return output

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        value, output = ctx.saved_tensors
        grad = grad_output * ctx.scale if ctx.scale != 1.0 else grad_output
        if ctx.reduce_type == xm.REDUCE_SUM:
            return grad, None, None, None
        if ctx.reduce_type == xm.REDUCE_MUL:
            return grad * torch.where(value != 0, output / value, torch.zeros_like(value)), None, None, None
        if ctx.reduce_type in (xm.REDUCE_MIN, xm.REDUCE_MAX):
            return torch.where(value == output, grad, torch.zeros_like(grad)), None, None, None
        raise RuntimeError(f"torch_xla.core.functions.all_reduce: no gradient for reduce type {ctx.reduce_type!r}")


def all_reduce(reduce_type: str, value: torch.Tensor, scale: float = 1.0, groups: Optional[list] = None) -> torch.Tensor:
    return AllReduce.apply(value, reduce_type, scale, groups)


class AllGather(torch.autograd.Function):

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, dim: int) -> torch.Tensor:
        ctx.dim, ctx.ordinal, ctx.world_size = dim, xr.global_ordinal(), xr.world_size()
        return xm.all_gather(value, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        size = grad_output.size(ctx.dim) // ctx.world_size
        return torch.narrow(grad_output.clone(), ctx.dim, ctx.ordinal * size, size), None


def all_gather(value: torch.Tensor, dim: int = 0) -> torch.Tensor:
    return AllGather.apply(value, dim)


__getattr__ = unsupported_names(__name__)
