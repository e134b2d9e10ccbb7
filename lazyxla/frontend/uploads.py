"""Host data copied to the device without the runtime lock, made lazy tensors later.

`cpu_tensor.to(dev)` holds the runtime lock (lazyxla/lock.py) for its whole copy
(the device's `_copy_from` kernel): right for one call in one thread, but a data
loader that uploaded batches that way from a background thread would stop the
training thread's tracing and syncs for as long as every batch takes to copy, the
very time it wants to overlap. So an upload has two halves. `stage` copies: it
touches no lazy tensor, storage or graph (`runtime.transfer.upload_now`, and a device
handle charged to the memory ledger, which has its own lock), so background threads
run it without the lock. `adopt` wraps a staged handle into a lazy tensor, which
registers a storage that syncs walk, so it takes the lock; the loader runs it in the
thread that takes the batch, which may hold the lock itself (a background thread
waiting for it there would deadlock).
"""
from __future__ import annotations

import dataclasses
import weakref

import torch

from ..ir.build import data_node
from ..lock import LOCK
from ..runtime import placement
from ..runtime.device_data import DeviceData
from ..runtime.transfer import upload_now
from .storage import Storage
from .tensor import LazyTensor
from .tracing import contiguous_strides


@dataclasses.dataclass(frozen=True)
class Staged:
    """A CPU tensor's copy on the device, not a lazy tensor yet."""
    data: DeviceData
    requires_grad: bool


def stage(t: torch.Tensor, device: int, sharding=None, process_local: bool = False) -> Staged:
    """Copy CPU tensor `t` to lazyxla `device` now, as `t.to(device)` would, but placed
    at once with `sharding` in SPMD mode (each device receives only its slice, no
    replicated copy first). `process_local`: `t` is this process's part of dimension 0
    (transfer.upload_now). Needs no runtime lock."""
    if placement.spmd_enabled():
        sharding = sharding or placement.replicated()
    elif sharding is not None:
        raise RuntimeError("lazyxla: placing an upload by a sharding needs SPMD mode; call lx.spmd.use_spmd() "
                           "before creating any lazyxla tensor")
    array, storage = upload_now(t, device, sharding, process_local)
    data = DeviceData(array, tuple(array.shape), t.dtype, device, sharding=sharding, stored_dtype=storage)
    return Staged(data, t.requires_grad)


def adopt(staged: Staged) -> LazyTensor:
    """The lazy tensor over a staged upload: device data, owned by its new storage (so
    automatic aliasing treats it as any upload); a leaf that requires grad if the source
    did (PyTorch/XLA's loader does the same)."""
    data = staged.data
    spec = (data.shape, contiguous_strides(data.shape), 0, data.dtype)
    with LOCK:
        st = Storage(None, data.device)
        data.owner = weakref.ref(st)
        st.value = data_node(data)
        out = LazyTensor.wrap(st, None, st.value, spec)
    if staged.requires_grad:
        out.requires_grad_()
    return out
