"""lazyxla: run ordinary PyTorch programs lazily on XLA through JAX, with safe,
explainable buffer donation. Public API: README.md; design notes: docs/."""
from __future__ import annotations

from .runtime import backend as _backend

# First, before JAX's backend starts threads: on CPU, one heap that keeps device buffers.
_backend.prepare_at_import()

from . import _jax  # noqa: E402  (enables JAX's 64-bit mode first)
from .frontend import torch_compat as _torch_compat  # noqa: E402
from .runtime import shutdown as _shutdown  # noqa: E402

_jax.check_version()            # warn outside the verified JAX and torch ranges
_torch_compat.check_version()
# The exit handler, before the modules below register theirs: atexit runs the last
# registered first, and data/'s loader threads must stop before the runtime quiesces.
_shutdown.install()

# Everything is imported first; the calls after the imports then set lazyxla up, in their order.
from . import data, debug, distributed, experimental, metrics, spmd, utils  # noqa: E402,F401
from . import dynamo as _dynamo  # noqa: E402
from ._versions import LAZYXLA_VERSION as __version__  # noqa: E402
from .compile import disk_cache as _disk_cache  # noqa: E402
from .compile.precision import matmul_precision, set_matmul_precision  # noqa: E402,F401
from .devices import device, device_count, devices, memory_info, platform  # noqa: E402,F401
from .devices import host_operands_enabled, set_host_operands  # noqa: E402,F401
from .donation import (  # noqa: E402,F401
    aliasing_enabled, explicit_donation, explicit_donation_enabled, get_buffer_donation, is_donated,
    set_aliasing, set_buffer_donation, set_explicit_donation)
from .errors import CheckpointError, DonatedBufferError, FailedOpError, ForkedRuntimeError, LoweringError  # noqa: E402,F401
from .frontend import registration as _frontend  # noqa: E402
from .frontend.tensor import LazyTensor  # noqa: E402,F401
from .jax_interop import call_jax, from_jax, jax_op, to_jax  # noqa: E402,F401
from .lower.registry import load_all as _load_lowerings  # noqa: E402
from .recompute import patch_torch_checkpoint as _patch_torch_checkpoint  # noqa: E402
from .runtime.storage_dtypes import current as storage_dtypes, set_storage_dtypes  # noqa: E402,F401
from .sync.api import graph_hash, sync, sync_tensors, wait_device_ops  # noqa: E402,F401
from .sync.barriers import implied_barriers_enabled, set_implied_barriers  # noqa: E402,F401
from .utils import optimization_barrier_, save  # noqa: E402,F401

_disk_cache.enable()        # the persistent compile cache, before anything compiles
_load_lowerings()           # every lowering rule, before the first op is classified
_frontend.install()         # the lazyxla device, its kernels and dispatcher, autocast, optimizer hooks
_patch_torch_checkpoint()   # torch.utils.checkpoint.checkpoint saves memory on lazyxla tensors
_dynamo.register()          # torch.compile(backend="lazyxla"), torch.ops.lazyxla.set_buffer_donor_

__all__ = [
    "device", "devices", "device_count", "platform", "memory_info", "set_host_operands", "host_operands_enabled",
    "sync", "sync_tensors", "wait_device_ops", "set_implied_barriers", "implied_barriers_enabled",
    "set_buffer_donation", "get_buffer_donation", "is_donated",
    "set_explicit_donation", "explicit_donation_enabled", "explicit_donation",
    "set_aliasing", "aliasing_enabled", "set_storage_dtypes", "storage_dtypes", "set_matmul_precision", "matmul_precision",
    "graph_hash", "metrics", "debug", "experimental", "save", "optimization_barrier_", "utils",
    "spmd", "distributed", "data", "call_jax", "to_jax", "from_jax", "jax_op",
    "DonatedBufferError", "LoweringError", "FailedOpError", "CheckpointError", "ForkedRuntimeError", "LazyTensor",
]
