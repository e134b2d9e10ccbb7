"""`torch_xla.distributed.fsdp`: only its auto-wrap policies (`.wrap`) are mapped.

`XlaFullyShardedDataParallel` (upstream's FSDP over per-process collectives) is not:
lazyxla shards with SPMD (`torch_xla.distributed.spmd`, docs/spmd.md)."""
from ....unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
