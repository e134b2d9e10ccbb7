"""CPU tensors of any shape as operands of lazy ops: off by default, as in PyTorch.

PyTorch lets an op mix devices only for 0-dim CPU tensors (they are scalars; lazyxla
lifts them, tracing.py). PyTorch/XLA also takes a CPU tensor of any shape next to
device tensors (`xla_t + torch.rand(5)`) and copies it to the device;
`lx.set_host_operands(True)` does the same (lazyxla.compat turns it on for
PyTorch/XLA scripts). It costs nothing on the ordinary path: the tracer meets such a
tensor only where it would raise the device mismatch, raises `HostOperand` instead,
and `dispatch` runs the op again with the CPU tensors uploaded to the device of the
op's first lazy tensor (a partial op records nothing before its operands are
converted, so the retry repeats no work). A CPU tensor an op writes into (an
in-place self, `out=`) is never uploaded: that stays a device mismatch.
"""
from __future__ import annotations

from typing import Any

import torch

from ..state import STATE
from .device import DEVICE_TYPE
from .opinfo import is_inplace
from .tensor import LazyTensor



class HostOperand(Exception):
    """Internal: a CPU operand met with host operands on (caught by dispatch)."""


def set_host_operands(enabled: bool) -> None:
    """Take CPU tensors of any shape as operands of lazy ops, uploading them (module
    docstring); the run-time state's `host_operands` mode."""
    STATE.set("host_operands", bool(enabled))


def host_operands_enabled() -> bool:
    return STATE.host_operands


def _first_device(values: Any) -> int:
    for v in values:
        if isinstance(v, LazyTensor):
            return v._st.device
        if isinstance(v, (list, tuple)):
            found = _first_device(v)
            if found >= 0:
                return found
    return -1


def _upload(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor) and not isinstance(value, LazyTensor) and value.device.type == "cpu" \
            and value.dim():
        return value.to(device)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_upload(v, device) for v in value)
    return value


def uploaded(info: Any, args: tuple, kwargs: dict) -> tuple:
    """(args, kwargs) with their CPU tensors (not a write target) on the device of the
    first lazy operand."""
    index = _first_device((*args, *kwargs.values()))
    device = torch.device(DEVICE_TYPE, max(index, 0))
    writes_self = is_inplace(info.func)
    new_args = tuple(a if (i == 0 and writes_self) else _upload(a, device) for i, a in enumerate(args))
    new_kwargs = {k: v if k == "out" else _upload(v, device) for k, v in kwargs.items()}
    return new_args, new_kwargs
