"""The lazyxla devices: the device type's name, the device list and device indices.

Registering the device with PyTorch (the renamed PrivateUse1 backend and its kernels)
is kernels.py's work; this module is what every frontend module may import.
"""
from __future__ import annotations

import torch

from .._jax import jax_devices
from ..runtime import backend, placement

DEVICE_TYPE = "lazyxla"
# Filled on first use, not at import: asking JAX for its devices starts its backend,
# after which jax.distributed.initialize (lx.distributed.initialize) can no longer run.
DEVICES: list[torch.device] = []


def lazyxla_devices() -> list[torch.device]:
    """The lazyxla devices: one per local JAX device, or one virtual device in SPMD mode."""
    if not DEVICES:
        count = 1 if placement.spmd_enabled() else len(jax_devices())
        DEVICES.extend(torch.device(DEVICE_TYPE, i) for i in range(count))
        # Here rather than at import: the platform is known only once JAX's backend runs.
        backend.current()
    return DEVICES


def reset_devices() -> None:
    """Recount the devices (SPMD switched on before any lazy tensor existed)."""
    DEVICES.clear()
    lazyxla_devices()


def device_index(device) -> int:
    """Index of a lazyxla device given as torch.device / str / None (default 0)."""
    lazyxla_devices()
    if device is None:
        return 0
    if not isinstance(device, torch.device):
        device = torch.device(device)
    if device.type != DEVICE_TYPE:
        raise ValueError(f"lazyxla: expected a lazyxla device, got {device}")
    index = device.index or 0
    if index >= len(DEVICES):
        raise ValueError(f"lazyxla: device {device} does not exist; lx.device_count() is {len(DEVICES)}")
    return index
