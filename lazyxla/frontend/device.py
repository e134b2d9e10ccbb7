"""Registration of the `lazyxla` device with PyTorch.

Route (verified on torch 2.11 to 2.15, see docs/design.md and torch_compat.py): PrivateUse1 renamed to
"lazyxla" with a Python device guard so autograd works without C++; Python
kernels on the PrivateUse1 key for allocation and for the factory ops whose
composite kernels would resize an `out=` tensor (a wrapper subclass cannot be
resized); every other op on a lazy tensor reaches `LazyTensor.__torch_dispatch__`.
"""
from __future__ import annotations

import functools

import torch

from .. import config
from .._jax import jax_devices
from ..runtime import host_heap, placement
from .torch_compat import setup_python_backend

DEVICE_TYPE = "lazyxla"
# Filled on first use, not at import: asking JAX for its devices starts its backend,
# after which jax.distributed.initialize (lx.distributed.initialize) can no longer run.
DEVICES: list[torch.device] = []


@functools.cache
def register() -> None:
    """Register the device with PyTorch (once)."""
    from . import device_module
    setup_python_backend(DEVICE_TYPE, device_module)


def lazyxla_devices() -> list[torch.device]:
    """The lazyxla devices: one per local JAX device, or one virtual device in SPMD mode."""
    if not DEVICES:
        count = 1 if placement.spmd_enabled() else len(jax_devices())
        DEVICES.extend(torch.device(DEVICE_TYPE, i) for i in range(count))
        # Here rather than at import: the platform is known only once JAX's backend
        # runs. On CPU, freed buffers then stay in the heap for the next step.
        host_heap.tune(jax_devices()[0].platform, config.SETTINGS.heap_tuning)
    return DEVICES


def reset_devices() -> None:
    """Recount the devices (SPMD switched on before any lazy tensor existed)."""
    DEVICES.clear()
    lazyxla_devices()


def device_index(device) -> int:
    """Index of a lazyxla device given as torch.device / str / None (default 0)."""
    lazyxla_devices()
    if device is None:
        return 0
    if not isinstance(device, torch.device):
        device = torch.device(device)
    if device.type != DEVICE_TYPE:
        raise ValueError(f"lazyxla: expected a lazyxla device, got {device}")
    index = device.index or 0
    if index >= len(DEVICES):
        raise ValueError(f"lazyxla: device {device} does not exist; lx.device_count() is {len(DEVICES)}")
    return index


def register_kernels() -> None:
    """Python kernels on the PrivateUse1 key (called once, after dispatch exists)."""
    from ..ir.node import Node
    from ..lock import LOCK
    from ..metrics import _counters as counters
    from ..state import STATE
    from . import tensor as _tensor
    from .special import copy_from_host
    from .storage import Storage
    from .tensor import LazyTensor
    from .tracing import check_allocation, contiguous_strides
    from .sync_hooks import eager_run

    lib = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten

    # These kernels are entry points like __torch_dispatch__: they hold the runtime
    # lock (lazyxla/lock.py) so that a sync in another thread never sees them half done.
    def dispatch(op, args, kwargs):
        with LOCK:
            return _tensor._dispatch(op, args, kwargs)   # the bound dispatcher (provenance may wrap it)

    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return _empty(tuple(size), None, dtype, device)

    def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        return _empty(tuple(size), tuple(stride), dtype, device)

    def _empty(size, stride, dtype, device):
        from .._jax import jax_dtype
        dtype = dtype or torch.get_default_dtype()
        jax_dtype(dtype)
        index = device_index(device)
        check_allocation(size, dtype)
        node = _zeros_node(size, dtype)
        spec = (size, stride if stride is not None else contiguous_strides(size), 0, dtype)
        if STATE.op_records:   # lx.metrics.set_op_records: a fresh lazyxla tensor
            counters["CreateXlaTensor"] += 1
        with LOCK:
            st = Storage(node, index)
            out = LazyTensor.wrap(st, None, node, spec)
            if STATE.eager and not STATE.eager_depth:   # eager mode: a factory's value exists at once
                eager_run([st])
            return out

    def _zeros_node(size, dtype) -> Node:
        from ..ir.node import intern_sig
        return Node(aten.zeros.default, (size,), {"dtype": dtype}, (), size, dtype,
                    intern_sig(("zeros", size, dtype)))

    def copy_from(src, dst, non_blocking=False):
        with LOCK:
            copy_from_host(src, dst)
        return dst

    def factory(op):
        def kernel(*args, **kwargs):
            return dispatch(op, args, kwargs)
        return kernel

    lib.impl("empty.memory_format", empty, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    lib.impl("_copy_from", copy_from, "PrivateUse1")
    for name, op in (("arange.start_step", aten.arange.start_step), ("eye.m", aten.eye.m),
                     ("triu_indices", aten.triu_indices.default),
                     ("tril_indices", aten.tril_indices.default)):
        lib.impl(name, factory(op), "PrivateUse1")
    lib.impl("arange", lambda end, **kw: dispatch(aten.arange.start_step, (0, end, 1), kw), "PrivateUse1")
    lib.impl("arange.start", lambda start, end, **kw: dispatch(aten.arange.start_step, (start, end, 1), kw),
             "PrivateUse1")
    lib.impl("eye", lambda n, **kw: dispatch(aten.eye.m, (n, n), kw), "PrivateUse1")
    lib.impl("randperm", _randperm, "PrivateUse1")
    _LIBS.append(lib)


_LIBS: list = []


def _randperm(n, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    # A permutation drawn on the host from PyTorch's generator: exact eager values,
    # and randperm is not on any hot path.
    perm = torch.randperm(n, dtype=dtype or torch.int64, generator=generator)
    return perm.to(device)
