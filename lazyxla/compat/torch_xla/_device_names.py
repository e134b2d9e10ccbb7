"""Upstream's device names: `"xla"`, `"xla:N"` and `torch.device("xla", N)` mean lazyxla's
device N wherever torch accepts a device, while the layer is installed.

PyTorch knows the type "xla" (its own DeviceType for PyTorch/XLA) but has no kernels
for it without torch_xla, and lazyxla's device type is "lazyxla" (PrivateUse1 renamed).
A torch-function mode, entered when `torch_xla` is imported and left on the stack,
rewrites device arguments before torch sees them: a `device=` keyword of any torch call
(factories, `new_*`, `to`) and the positional device of `Tensor.to`, which
`Module.to` also ends in. The same mode renames the other way what `t.device` reads:
a lazyxla tensor reports `xla:N`, as upstream's do (`t.device == torch_xla.device()`,
`t.device.type == "xla"`, printed `device='xla:0'`). torch's own Python code then sees
"xla" too; it hands the device back to torch calls, which the mode renames, and its
checks for foreach and fused kernels answer as for upstream's devices (the plain loops).
lazyxla's own code reads its device index (`_st.device`), not the name; ops run
with the mode popped, so what runs inside them sees lazyxla's name. Everything else
passes through untouched, at the cost of one Python call per torch call. Options weighed: returning lazyxla's devices from
`torch_xla.device()` only (scripts that write `"xla"` fail, and `torch_xla.device()`
would not equal `torch.device("xla:0")` as upstream's does), or registering kernels for
torch's XLA dispatch key (autograd then needs a C++ device guard for "xla").
"""
from __future__ import annotations

from typing import Any

import os

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

import lazyxla as lx

UPSTREAM_TYPE = "xla"
_TO = (torch.Tensor.to,)
_DEVICE_GETTER = torch._C.TensorBase.__dict__["device"]   # `t.device` calls the mode with its __get__
_HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


_LAZYXLA_TYPE = torch._C._get_privateuse1_backend_name()   # "lazyxla", set by `import lazyxla`


def lazyxla_device(index: int = 0) -> torch.device:
    """lx.device(index), after applying upstream's `CPU_NUM_DEVICES` (the number of
    host devices; upstream reads it when its runtime starts, scripts set it after
    `import torch_xla`) as JAX's host device count, which JAX reads when its
    backend starts; once started, the count is fixed and the variable has no effect."""
    count = os.environ.get("CPU_NUM_DEVICES")
    flags = os.environ.get("XLA_FLAGS", "")
    if count and _HOST_DEVICES_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_HOST_DEVICES_FLAG}={int(count)}".strip()
    return lx.device(index)


def to_lazyxla(device: Any) -> Any:
    """`device` with an "xla" type renamed to lazyxla's; anything else unchanged."""
    if isinstance(device, torch.device):
        if device.type == UPSTREAM_TYPE:
            return lazyxla_device(device.index or 0)
    elif isinstance(device, str) and device.startswith(UPSTREAM_TYPE) and \
            (len(device) == 3 or device[3] == ":"):
        return lazyxla_device(int(device[4:]) if len(device) > 4 else 0)
    return device


def to_upstream(device: torch.device) -> torch.device:
    """lazyxla's device N as upstream names it, `torch.device("xla", N)`."""
    return torch.device(UPSTREAM_TYPE, device.index or 0)


class UpstreamDeviceNames(TorchFunctionMode):
    """Renames "xla" devices in the arguments of every torch call (module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__self__", None) is _DEVICE_GETTER:
            device = func(*args)
            return to_upstream(device) if device.type == _LAZYXLA_TYPE else device
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None:
            kwargs = dict(kwargs, device=to_lazyxla(device))
        if func in _TO and len(args) > 1:
            args = (args[0], to_lazyxla(args[1]), *args[2:])
        return func(*args, **kwargs)


_mode = None
_kernels: list = []


def _register_factory_kernels() -> None:
    """Kernels on torch's own "XLA" dispatch key for the ops that allocate on a device:
    they allocate on lazyxla's instead. The mode above is off while a torch call it
    intercepted runs (torch pops a mode during its own handler), so code that such a
    call runs (the backward of `loss.backward()`, with custom Functions and scan bodies)
    creates "xla" tensors through these; every other op then meets a lazyxla tensor."""
    if _kernels:
        return
    lib = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten

    def redirect(op):
        def kernel(*args, **kwargs):
            return op(*args, **dict(kwargs, device=to_lazyxla(kwargs.get("device"))))
        return kernel

    for name, op in (("empty.memory_format", aten.empty.memory_format), ("empty_strided", aten.empty_strided.default),
                     ("arange.start_step", aten.arange.start_step), ("arange", aten.arange.default),
                     ("arange.start", aten.arange.start), ("eye", aten.eye.default), ("eye.m", aten.eye.m),
                     ("randperm", aten.randperm.default)):
        lib.impl(name, redirect(op), "XLA")
    _kernels.append(lib)


def _register_device_module() -> None:
    """`torch.xla` is lazyxla's device module (`torch.lazyxla`), so torch's generic device
    code that looks a module up by the type a tensor reports (`torch.get_device_module`,
    the RNG state of `torch.utils.checkpoint`) finds it. Registered once; it stays."""
    if not hasattr(torch, UPSTREAM_TYPE):
        torch._register_device_module(UPSTREAM_TYPE, torch.get_device_module(_LAZYXLA_TYPE))


def enable() -> None:
    """Enter the mode once per process (it stays on the stack); register the kernels
    and the device module; take CPU tensors of any shape as operands of device ops, as
    upstream does (`xla_t + torch.rand(5)`; torch itself only takes 0-dim ones):
    lx.set_host_operands(True)."""
    global _mode
    _register_factory_kernels()
    _register_device_module()
    lx.set_host_operands(True)
    if _mode is None:
        _mode = UpstreamDeviceNames()
        _mode.__enter__()


def disable() -> None:
    """Leave the mode (lazyxla.compat.uninstall), if nothing entered a mode after it;
    CPU operands are refused again, as in PyTorch."""
    global _mode
    lx.set_host_operands(False)
    stack = _get_current_function_mode_stack()
    if _mode is not None and stack and stack[-1] is _mode:
        _mode.__exit__(None, None, None)
        _mode = None
