"""`torch_xla.runtime` (xr): device type and counts, ordinals, SPMD switch.

lazyxla runs one process per host driving all its local devices (SPMD or one
device); PyTorch/XLA's one-replica-per-device multiprocessing is not mapped. So
the replica world is: one replica per process, or one in SPMD mode (as upstream).
"""
from __future__ import annotations

from typing import Optional

import lazyxla as lx

from ..unsupported import refuse, unsupported_names
from . import _spmd

_HW = {"cpu": "CPU", "gpu": "CUDA", "tpu": "TPU"}


def device_type() -> Optional[str]:
    """'CPU', 'CUDA' or 'TPU': the JAX platform behind lazyxla (lx.platform)."""
    return _HW.get(lx.platform(), lx.platform().upper())


def using_pjrt() -> bool:
    return True   # JAX's runtime is PJRT


def is_bf16_supported() -> bool:
    return True


def local_device_count() -> int:
    return lx.device_count()


def addressable_device_count() -> int:
    return lx.device_count()


def addressable_runtime_device_count() -> int:
    return lx.device_count()


def global_device_count() -> int:
    """Devices of all processes, assuming each has as many as this one."""
    return lx.device_count() * _spmd.process_count()


global_runtime_device_count = global_device_count


def process_index() -> int:
    return _spmd.process_index()


def process_count() -> int:
    return _spmd.process_count()


host_index = process_index


def local_process_count() -> int:
    return 1


def world_size() -> int:
    """Replicas: 1 in SPMD mode (as upstream), else one per process."""
    return 1 if is_spmd() else _spmd.process_count()


def global_ordinal() -> int:
    return 0 if is_spmd() else _spmd.process_index()


def local_ordinal() -> int:
    return 0


def use_spmd(auto: Optional[bool] = False) -> None:
    """lx.spmd.use_spmd(); `auto=True` (XLA's auto-sharding) has no lazyxla counterpart."""
    if auto:
        refuse("torch_xla.runtime.use_spmd(auto=True)", "Mark shardings with xs.mark_sharding instead")
    _spmd.required("spmd", "torch_xla.runtime.use_spmd").use_spmd()


def is_spmd() -> bool:
    return _spmd.is_spmd()


__getattr__ = unsupported_names(__name__)
