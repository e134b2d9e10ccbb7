"""Device queries: `lx.device()`, `devices`, `device_count`, `platform`, `memory_info` (README.md,
"What is supported")."""
from __future__ import annotations

import torch

from .frontend.device import DEVICES, device_index, lazyxla_devices
from .frontend.device_module import memory_device
from .frontend.host_operands import host_operands_enabled, set_host_operands  # noqa: F401  (lx.set_host_operands)
from .runtime import backend, memory


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
    lazyxla_devices()
    return backend.platform()


def memory_info(device=None) -> dict:
    """PyTorch/XLA's `xm.get_memory_info` keys, as ints: `bytes_used` (live buffers of
    lazyxla tensors), `bytes_limit` (what the device holds: the allocator's limit, or
    the host's memory on CPU) and `peak_bytes_used` (with executing graphs' temporaries).
    On accelerators `backend` adds what the backend's allocator reports."""
    index = memory_device(device)
    info = {"bytes_used": memory.allocated(index), "bytes_limit": memory.bytes_limit(index),
            "peak_bytes_used": memory.peak(index)}
    backend = memory.backend_stats(index)
    if backend:
        info["backend"] = {k: int(v) for k, v in backend.items()}
    return info
