"""lazyxla: run ordinary PyTorch programs lazily on XLA through JAX, with safe,
explainable buffer donation. Public API: see API.md (shared/) and README.md."""
from __future__ import annotations

from . import _jax  # (enables JAX's 64-bit mode first)
from .frontend import torch_compat as _torch_compat

_jax.check_version()            # warn outside the verified JAX and torch ranges
_torch_compat.check_version()
from .frontend import device as _device  # noqa: E402

_device.register()

from .compile import disk_cache as _disk_cache  # noqa: E402

_disk_cache.enable()   # the persistent compile cache, before anything compiles

from .lower.registry import load_all as _load_lowerings  # noqa: E402

_load_lowerings()

from . import metrics  # noqa: E402,F401
from .errors import CheckpointError, DonatedBufferError, ForkedRuntimeError, LoweringError  # noqa: E402,F401
from .frontend import dispatch as _dispatch  # noqa: E402,F401
from .frontend.tensor import LazyTensor  # noqa: E402,F401

_device.register_kernels()
from .frontend import accelerator as _accelerator  # noqa: E402

_accelerator.install()   # torch.accelerator.* and Tensor.pin_memory() for the lazyxla device

from .frontend import autocast as _autocast  # noqa: E402
from .frontend import grad_scaler as _grad_scaler  # noqa: E402,F401  (registers GradScaler's ops)

_autocast.register()   # torch.autocast("lazyxla", ...) with PyTorch's op lists

from .frontend.optim import enable_foreach_default as _enable_foreach_default  # noqa: E402
from .frontend.optim import track_optimizer_steps as _track_optimizer_steps  # noqa: E402

_enable_foreach_default()
_track_optimizer_steps()

from .sync.api import graph_hash, sync, sync_tensors, wait_device_ops  # noqa: E402,F401
from .sync.barriers import implied_barriers_enabled, set_implied_barriers  # noqa: E402,F401
from .donation import (  # noqa: E402,F401
    aliasing_enabled, explicit_donation, explicit_donation_enabled, get_buffer_donation, is_donated,
    set_aliasing, set_buffer_donation, set_explicit_donation)
from .utils import optimization_barrier_, save  # noqa: E402,F401
from . import utils  # noqa: E402,F401  (lx.utils.checkpoint)
from .recompute import patch_torch_checkpoint as _patch_torch_checkpoint  # noqa: E402

_patch_torch_checkpoint()   # torch.utils.checkpoint.checkpoint saves memory on lazyxla tensors
from . import debug  # noqa: E402,F401
from . import experimental  # noqa: E402,F401
from . import distributed, spmd  # noqa: E402,F401
from . import data  # noqa: E402,F401  (lx.data.DeviceLoader)
from .devices import device, device_count, devices, memory_info, platform  # noqa: E402,F401
from .devices import host_operands_enabled, set_host_operands  # noqa: E402,F401
from .runtime.storage_dtypes import current as storage_dtypes, set_storage_dtypes  # noqa: E402,F401
from .compile.precision import matmul_precision, set_matmul_precision  # noqa: E402,F401
from .jax_interop import call_jax, from_jax, jax_op, to_jax  # noqa: E402,F401
from . import dynamo as _dynamo  # noqa: E402

_dynamo.register()   # torch.compile(backend="lazyxla"), torch.ops.lazyxla.set_buffer_donor_

from ._versions import LAZYXLA_VERSION as __version__  # noqa: E402

__all__ = [
    "device", "devices", "device_count", "platform", "memory_info", "set_host_operands", "host_operands_enabled",
    "sync", "sync_tensors", "wait_device_ops", "set_implied_barriers", "implied_barriers_enabled",
    "set_buffer_donation", "get_buffer_donation", "is_donated",
    "set_explicit_donation", "explicit_donation_enabled", "explicit_donation",
    "set_aliasing", "aliasing_enabled", "set_storage_dtypes", "storage_dtypes", "set_matmul_precision", "matmul_precision",
    "graph_hash", "metrics", "debug", "experimental", "save", "optimization_barrier_", "utils",
    "spmd", "distributed", "data", "call_jax", "to_jax", "from_jax", "jax_op",
    "DonatedBufferError", "LoweringError", "CheckpointError", "ForkedRuntimeError", "LazyTensor",
]
