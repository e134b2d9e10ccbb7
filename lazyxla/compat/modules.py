"""The torch_xla module names the compatibility layer provides (docs/compat.md lists them):
read by the import finder (install.py) and by the modules' refusal of unknown names
(unsupported.py)."""
from __future__ import annotations

PACKAGES = frozenset((
    "torch_xla", "torch_xla.core", "torch_xla.debug", "torch_xla.experimental", "torch_xla._dynamo",
    "torch_xla.utils", "torch_xla.distributed", "torch_xla.test", "torch_xla.distributed.fsdp",
    "torch_xla.experimental.distributed_checkpoint", "torch_xla.amp", "torch_xla.backends",
    "torch_xla.distributed.fsdp",
))
MODULES = PACKAGES | frozenset((
    "torch_xla._XLAC", "torch_xla.runtime", "torch_xla.core.xla_model", "torch_xla.debug.metrics",
    "torch_xla.experimental.gradient_accumulation", "torch_xla._dynamo.dynamo_bridge",
    "torch_xla.experimental.scan", "torch_xla.experimental.scan_layers", "torch_xla.experimental.fori_loop",
    "torch_xla.core.xla_builder",
    "torch_xla.core.xla_op_registry", "torch_xla.experimental.custom_kernel",
    "torch_xla.utils.utils", "torch_xla.utils.buffer_donor_context", "torch_xla.utils.checkpoint",
    "torch_xla.distributed.spmd",
    "torch_xla.distributed.parallel_loader", "torch_xla.distributed.xla_multiprocessing", "torch_xla.amp.syncfree",
    "torch_xla.test.test_utils", "torch_xla.core.xla_env_vars", "torch_xla.distributed.xla_backend",
    "torch_xla.distributed.fsdp.wrap",
    "torch_xla.experimental.distributed_checkpoint._helpers",
    "torch_xla.experimental.distributed_checkpoint.manager",
    "torch_xla.experimental.spmd_fully_sharded_data_parallel",
    "torch_xla.distributed.fsdp.wrap", "torch_xla.distributed.fsdp.utils",
    "torch_xla.debug.profiler", "torch_xla.debug.model_comparator", "torch_xla.distributed.data_parallel",
    "torch_xla.utils.serialization", "torch_xla.utils.dlpack", "torch_xla.core.functions",
))
