"""Lazy tensors over host data copied to the device without holding the runtime lock.

`cpu_tensor.to(dev)` holds the runtime lock (lazyxla/lock.py) for its whole copy
(the device's `_copy_from` kernel): right for one call in one thread, but a data
loader that uploaded batches that way from a background thread would stop the
training thread's tracing and syncs for as long as every batch takes to copy,
which is the very time it wants to overlap. Here the copy runs outside the lock
(`runtime.transfer.upload_now` touches no lazy state); only wrapping the finished
device array into a lazy tensor, which registers a storage that syncs walk, takes it.
"""
from __future__ import annotations

import torch

from ..ir.node import data_node
from ..lock import LOCK
from ..runtime import placement
from ..runtime.device_data import DeviceData
from ..runtime.transfer import upload_now
from .storage import Storage
from .tensor import LazyTensor
from .tracing import contiguous_strides


def upload_tensor(t: torch.Tensor, device: int, sharding=None, process_local: bool = False) -> LazyTensor:
    """A new lazyxla tensor holding a copy of CPU tensor `t` as device data, as
    `t.to(device)` would give, but placed at once with `sharding` in SPMD mode (no
    replicated copy first) and copied without the runtime lock. `process_local`: `t`
    is this process's part of dimension 0 (transfer.upload_now). A tensor that
    requires grad gives a leaf that requires grad (PyTorch/XLA's loader does the same)."""
    if placement.spmd_enabled():
        sharding = sharding or placement.replicated()
    elif sharding is not None:
        raise RuntimeError("lazyxla: placing an upload by a sharding needs SPMD mode; call lx.spmd.use_spmd() "
                           "before creating any lazyxla tensor")
    array, storage = upload_now(t, device, sharding, process_local)
    shape = tuple(array.shape)
    with LOCK:
        st = Storage(None, device)
        data = DeviceData(array, shape, t.dtype, device, owner=st, sharding=sharding, storage=storage)
        st.value = data_node(data)
        out = LazyTensor.wrap(st, None, st.value, (shape, contiguous_strides(shape), 0, t.dtype))
    if t.requires_grad:
        out.requires_grad_()
    return out
