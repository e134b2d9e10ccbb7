"""`torch_xla.runtime` (xr): device type and counts, ordinals, SPMD switch.

lazyxla runs one process per host driving all its local devices (SPMD or one
device); PyTorch/XLA's one-replica-per-device multiprocessing is not mapped. So
the replica world is: one replica per process, or one in SPMD mode (as upstream).
"""
from __future__ import annotations

import os
from typing import Optional

import lazyxla as lx

from ..unsupported import refuse, unsupported_names
from ._device_names import lazyxla_device

_HW = {"cpu": "CPU", "gpu": "CUDA", "tpu": "TPU"}


def device_type() -> Optional[str]:
    """'CPU', 'CUDA' or 'TPU': the JAX platform behind lazyxla (lx.platform)."""
    lazyxla_device()
    requested = os.environ.get("PJRT_DEVICE")
    actual = _HW.get(lx.platform(), lx.platform().upper())
    if requested and requested.upper() != actual:
        refuse(f"PJRT_DEVICE={requested} (torch_xla.runtime.set_device_type)",
               f"lazyxla runs on the platform JAX chose, {actual}; pick it with JAX_PLATFORMS")
    return actual


def set_device_type(pjrt_device: str) -> None:
    """Sets `PJRT_DEVICE`, as upstream; the platform itself is JAX's choice, so a type
    other than it raises UnsupportedError at the next device query (device_type())."""
    os.environ["PJRT_DEVICE"] = pjrt_device


def using_pjrt() -> bool:
    return True   # JAX's runtime is PJRT


def is_bf16_supported() -> bool:
    return True


def local_device_count() -> int:
    """lazyxla devices of this process: 1 in SPMD mode (the virtual device, as upstream)."""
    lazyxla_device()
    return lx.device_count()


addressable_device_count = local_device_count


def global_device_count() -> int:
    """lazyxla devices of all processes: 1 in SPMD mode (one virtual device, as upstream)."""
    return lx.device_count() if is_spmd() else lx.device_count() * lx.distributed.process_count()


def global_runtime_device_count() -> int:
    """Physical devices of all processes (what an SPMD mesh spans)."""
    return lx.spmd.get_1d_mesh().size()


def addressable_runtime_device_count() -> int:
    """Physical devices of this process (all processes have as many)."""
    return global_runtime_device_count() // lx.distributed.process_count()


def process_index() -> int:
    return lx.distributed.process_index()


def process_count() -> int:
    return lx.distributed.process_count()


host_index = process_index


def local_process_count() -> int:
    """Processes on this host: those of torch_xla.launch / xmp.spawn, else 1."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if not is_spmd() else 1


def world_size() -> int:
    """Replicas: 1 in SPMD mode (as upstream), else one per process."""
    return 1 if is_spmd() else lx.distributed.process_count()


def global_ordinal() -> int:
    return 0 if is_spmd() else lx.distributed.process_index()


def local_ordinal() -> int:
    """This process's index on its host (torch_xla.launch / xmp.spawn set LOCAL_RANK)."""
    return 0 if is_spmd() else int(os.environ.get("LOCAL_RANK", "0"))


def use_spmd(auto: Optional[bool] = False) -> None:
    """lx.spmd.use_spmd(); `auto=True` (XLA's auto-sharding) has no lazyxla counterpart."""
    if auto:
        refuse("torch_xla.runtime.use_spmd(auto=True)", "Mark shardings with xs.mark_sharding instead")
    lx.spmd.use_spmd()
    os.environ["XLA_USE_SPMD"] = "1"   # as upstream, which reads it back


def is_spmd() -> bool:
    return lx.spmd.is_spmd()


__getattr__ = unsupported_names(__name__)
