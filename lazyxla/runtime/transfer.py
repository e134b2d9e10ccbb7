"""Host <-> device copies (the only places that move tensor data across)."""
from __future__ import annotations

import jax
import numpy as np
import torch
from jax.experimental import multihost_utils

from .. import metrics
from .._jax import jax_devices, jax_dtype
from ..lock import check_not_forked
from ..patches import x64
from . import placement, storage_dtypes
from .device_data import DeviceData
from .device_put import owned, place


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # numpy() refuses tensors with the lazy conjugate / negative bit (x.conj() on CPU)
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(jax_dtype(torch.bfloat16))
    return t.numpy()


_BF16 = np.dtype(jax_dtype(torch.bfloat16))


@x64
def place_staged(datas: list, device: int) -> None:
    """Place the host values of staged handles on `device` (outside SPMD) in one transfer:
    the staged values a graph donates (the others go to the call as host arrays,
    runtime/execute.py `_param_args`); one `device_put` per value (with `place`'s second,
    XLA-owned copy) cost more than the rest of the upload path. No owned copy is needed:
    the host array belongs to the handle and never changes, and a donated adopted buffer is
    not written in place (tests/test_generate.py)."""
    target = jax.sharding.SingleDeviceSharding(jax_devices()[device])
    with metrics.timed("TransferToDeviceTime"):
        arrays = jax.device_put([d.host for d in datas], target, may_alias=False)
    for data, array in zip(datas, arrays):
        data.placed(array)


def staged(t: torch.Tensor, device: int, owner=None) -> DeviceData:
    """Device data of CPU tensor `t`, a value the host computed (sync/host_split.py,
    sync/entries.py): it stays on the host, also as the handle's `host_copy`, until a graph
    needs it on the device (`DeviceData.array` uploads it then). Under a storage dtype
    policy it is held as an upload would be, in the narrower dtype (and the host copy is
    what a download would give). `t` must not change afterwards."""
    host_t, storage = _host_copy(t)
    data = DeviceData(None, tuple(t.shape), t.dtype, device, owner, host=_to_numpy(host_t), stored_dtype=storage)
    data.host_copy = t if storage == t.dtype else host_t.to(t.dtype)
    return data


def _host_copy(t: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """`t` on the host in the dtype the device stores it in (narrowed on the host, with
    torch's rounding, eager's .to(storage): half the bytes move), and that dtype."""
    jax_dtype(t.dtype)  # clear error for unsupported dtypes
    storage = storage_dtypes.storage_for(t.dtype)
    if storage == t.dtype:
        return t.cpu(), storage
    t = t.detach().cpu()
    if not (storage.is_floating_point or storage.is_complex):
        storage_dtypes.check_integer_range(t, storage)
    return t.to(storage), storage


@x64
def upload_now(t: torch.Tensor, device: int, sharding=None,
               process_local: bool = False) -> tuple[jax.Array, torch.dtype]:
    """The device array of CPU tensor `t`, placed at once in XLA-owned buffers (see
    `upload`), and its storage dtype. Outside SPMD on lazyxla `device`; in SPMD mode
    by `sharding` (replicated if None), each device receiving only its slice; with
    `process_local`, `t` is this process's slice of dimension 0 of a global array
    (every process passes its own). It touches no lazy tensor, storage or graph, so
    it runs without the runtime lock (the data loader calls it from its threads)."""
    host_t, storage = _host_copy(t)
    if placement.spmd_enabled():
        sharding = sharding or placement.replicated()
        host = _to_numpy(host_t)
        if process_local and jax.process_count() > 1:
            with metrics.timed("TransferToDeviceTime"):
                array = owned(jax.make_array_from_process_local_data(sharding, host), sharding)
                array.block_until_ready()
        else:
            array = place(host, sharding)
    else:
        array = place(_to_numpy(host_t), None, device)
    metrics.metric_add("OutboundData", host_t.numel() * host_t.element_size())
    return array, storage


@x64
def upload(t: torch.Tensor, device: int, owner=None, sharding=None) -> DeviceData:
    """Copy a CPU tensor to `device`; the returned handle is owned by `owner`.

    On the CPU backend `jax.device_put` adopts the host memory without copying
    (also with may_alias=False, jax 0.10.2) and asynchronously, which breaks two
    promises: the device tensor would change when the source CPU tensor is later
    modified, and XLA cannot reuse an adopted buffer when it is donated (the
    first step after an upload would hold two copies). So the adopted array is
    copied once on the device into an XLA-owned buffer (device_put.py `owned`), and the copy
    completes before we return (a host-to-device copy is synchronous in PyTorch
    too). `may_alias=False` on that device array, unlike on a host array, does
    copy (tests/test_donation_safety.py checks both of `owned`'s paths).
    """
    if placement.spmd_enabled():
        host_t, storage = _host_copy(t)
        # SPMD: staged on the host until first use (DeviceData.host says why); the
        # copy detaches it from the source tensor as the device copy would.
        host = np.array(_to_numpy(host_t), copy=True)
        metrics.metric_add("OutboundData", host_t.numel() * host_t.element_size())
        return DeviceData(None, tuple(t.shape), t.dtype, device, owner,
                          sharding=sharding or placement.replicated(), host=host, stored_dtype=storage)
    array, storage = upload_now(t, device)
    return DeviceData(array, tuple(t.shape), t.dtype, device, owner, stored_dtype=storage)


@x64
def download(array, dtype: torch.dtype) -> torch.Tensor:
    """Blocking copy of a device array to a new CPU tensor of `dtype` (the array may be
    held in a narrower storage dtype: the copy is widened on the host)."""
    check_not_forked()
    metrics.counter_add("DeviceWait")
    with metrics.timed("TransferFromDeviceTime"):
        if array.is_fully_addressable:
            host = np.asarray(array)
        elif array.is_fully_replicated:
            host = np.asarray(array.addressable_data(0))
        else:
            # Shards of other processes: every process reads the same tensors at the same
            # point of an SPMD program, so this collective is reached by all of them.
            host = np.asarray(multihost_utils.process_allgather(array, tiled=True))
    if host.dtype == _BF16:
        out = torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    else:
        out = torch.from_numpy(host.copy() if not host.flags.writeable else host)
    metrics.metric_add("InboundData", out.numel() * out.element_size())
    return out if out.dtype == dtype else out.to(dtype)


@x64
def reshard(array: jax.Array, sharding) -> jax.Array:
    """`array` moved to `sharding` (also onto another device order), into buffers XLA
    owns so that they can be donated later."""
    with metrics.timed("TransferToDeviceTime"):
        return owned(jax.device_put(array, sharding), sharding)
