"""Device queries (API.md "Devices")."""
from __future__ import annotations

import torch

from ._jax import jax_devices
from .frontend.device import DEVICES, device_index, lazyxla_devices


def device(index: int = 0) -> torch.device:
    """`torch.device("lazyxla", index)`."""
    device_index(torch.device("lazyxla", index))
    return DEVICES[index]


def devices() -> list[torch.device]:
    return list(lazyxla_devices())


def device_count() -> int:
    return len(lazyxla_devices())


def platform() -> str:
    """The JAX platform behind the device: "cpu", "gpu" or "tpu"."""
    p = jax_devices()[0].platform
    return "gpu" if p in ("cuda", "rocm", "gpu") else p
