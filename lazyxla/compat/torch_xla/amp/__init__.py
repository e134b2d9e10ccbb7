"""`torch_xla.amp`: mixed precision as PyTorch's own on the lazyxla device.

`autocast(device, enabled=True, dtype=None, cache_enabled=True)` is
`torch.autocast("lazyxla", ...)` (PyTorch's autocast op lists; README.md, "Mixed
precision"), with upstream's default dtype: bfloat16, float16 on CUDA. `GradScaler` is
`torch.amp.GradScaler("lazyxla", ...)`. The `syncfree` optimizers are torch.optim's
(syncfree.py says what that changes)."""
from __future__ import annotations

from typing import Optional

import torch

from ...unsupported import unsupported_names
from .. import runtime
from .._device_names import to_lazyxla


def autocast(device=None, enabled: bool = True, dtype: Optional[torch.dtype] = None,
             cache_enabled: bool = True) -> torch.autocast:
    """A context manager and decorator, as upstream's: `torch.autocast("lazyxla")`.
    `device` is an "xla" (or lazyxla) device or None; the autocast is per device type."""
    if device is not None:
        device = to_lazyxla(device)
        if torch.device(device).type != "lazyxla":
            raise ValueError(f"torch_xla.amp.autocast: {device} is not an XLA device; use torch.autocast for it")
    if dtype is None:
        dtype = torch.float16 if runtime.device_type() == "CUDA" else torch.bfloat16
    return torch.autocast("lazyxla", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


def GradScaler(init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
               growth_interval: int = 2000, enabled: bool = True, use_zero_grad: bool = False) -> torch.amp.GradScaler:
    """`torch.amp.GradScaler("lazyxla", ...)`; `use_zero_grad` (upstream's way of
    zeroing gradients with inf) has no counterpart and must stay False."""
    if use_zero_grad:
        from ...unsupported import refuse
        refuse("torch_xla.amp.GradScaler(use_zero_grad=True)")
    return torch.amp.GradScaler("lazyxla", init_scale=init_scale, growth_factor=growth_factor,
                                backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


__getattr__ = unsupported_names(__name__)
