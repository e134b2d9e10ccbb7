"""`torch_xla.experimental.distributed_checkpoint._helpers`: the helpers scripts and
upstream's tests import, as lx.spmd.checkpoint's."""
from __future__ import annotations

from lazyxla.spmd import checkpoint as _ck

from ....unsupported import unsupported_names

_sharded_cpu_state_dict = _ck.sharded_cpu_state_dict
_CpuShards = _ck.CpuShards
_is_sharded_tensor = _ck.is_sharded

__getattr__ = unsupported_names(__name__)
