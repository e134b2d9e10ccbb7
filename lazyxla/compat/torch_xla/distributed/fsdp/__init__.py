"""`torch_xla.distributed.fsdp`: the names the FSDPv2 recipes import from it.

PyTorch/XLA's first FSDP (`XlaFullyShardedDataParallel`: one process per device,
parameters gathered by collectives around each wrapped module) is not provided:
lazyxla runs FSDP as one SPMD program, `torch_xla.experimental.
spmd_fully_sharded_data_parallel.SpmdFullyShardedDataParallel`. Its class is
importable (transformers imports it next to the FSDPv2 names) and refuses to be made.
"""
from __future__ import annotations

from typing import Any, NoReturn

from ....unsupported import refuse, unsupported_names
from .utils import checkpoint_module  # noqa: F401


class XlaFullyShardedDataParallel:
    def __new__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        refuse("torch_xla.distributed.fsdp.XlaFullyShardedDataParallel (FSDP over one process per device)",
               "Use FSDP through SPMD: torch_xla.experimental.spmd_fully_sharded_data_parallel."
               "SpmdFullyShardedDataParallel (in transformers: fsdp_config={'xla': True, 'xla_fsdp_v2': True})")


__getattr__ = unsupported_names(__name__)
