"""`torch_xla.core.xla_env_vars` (xenv): names of the environment variables the layer
reads, under upstream's constant names."""
from __future__ import annotations

from ...unsupported import unsupported_names

PJRT_DEVICE = "PJRT_DEVICE"                # torch_xla.runtime.set_device_type / device_type
CPU_NUM_DEVICES = "CPU_NUM_DEVICES"        # host device count (_device_names.py)
XLA_USE_SPMD = "XLA_USE_SPMD"              # set by torch_xla.runtime.use_spmd
RANK = "RANK"                              # torch_xla.launch / xmp.spawn workers
WORLD_SIZE = "WORLD_SIZE"
LOCAL_RANK = "LOCAL_RANK"

__getattr__ = unsupported_names(__name__)
