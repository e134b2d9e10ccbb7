"""`lx.to_jax` / `lx.from_jax`: one device buffer seen by torch and by JAX, no copy.

A buffer handed across is held by both sides, and JAX may read it at any time
later. lazyxla marks it on its handle (`DeviceData.external`) and from then on
never donates it, neither automatically (an in-place update writes a new
buffer; the old one stays with JAX) nor explicitly (`lx.set_buffer_donation`
returns False). The mark lasts as long as lazyxla holds the handle: lazyxla
cannot see when JAX lets go, and a buffer freed under JAX would be a crash or a
wrong value, a copy a cost of one step.
"""
from __future__ import annotations

import jax
import torch

from .._jax import jax_devices, jax_dtype, torch_dtype
from ..frontend.tensor import LazyTensor
from ..frontend.uploads import Staged, adopt
from ..ir.node import DATA
from ..lock import LOCK
from ..patches import in_x64
from ..runtime import placement
from ..runtime.device_data import DeviceData
from ..sync.api import sync_tensors


def to_jax(t: torch.Tensor) -> jax.Array:
    """The `jax.Array` behind lazy tensor `t`, without a copy; pending work of `t` is
    materialized first (a partial sync that donates nothing). A view gets a buffer of
    its own (its elements copied on the device), and so does a tensor stored in a
    narrower dtype under `lx.set_storage_dtypes` (converted to its torch dtype).
    A donated tensor raises `lx.DonatedBufferError`."""
    if not isinstance(t, LazyTensor):
        kind = f"a {t.device} tensor" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
        raise TypeError(f"lazyxla: to_jax expects a lazyxla tensor, got {kind}; for a CPU tensor use "
                        "jnp.asarray(t.numpy()), or move it with t.to(lx.device()) first")
    with LOCK:
        t.checked_value()   # a donated tensor (or view of one) raises here
        if t._view is not None:
            t = t.detach().clone()
        if t.lazy_value().op is not DATA:
            sync_tensors([t], wait=False, donate_inplace=False)
        data = t.checked_value().data
        array = data.live_array()
        if array is None:
            raise RuntimeError(
                "lazyxla: to_jax inside a function being captured (torch.compile, gradient accumulation, "
                "scan): its inputs have no buffer yet. Use lx.call_jax there, or call to_jax outside.")
        data.external = "lx.to_jax"
    if data.stored_dtype != data.dtype:
        with in_x64():
            array = array.astype(jax_dtype(data.dtype))
    return array


def from_jax(a: jax.Array, requires_grad: bool = False) -> LazyTensor:
    """A lazy tensor over `a`'s buffer, without a copy; its dtype is `a.dtype`'s torch dtype.
    In SPMD mode the tensor keeps `a`'s sharding; outside it `a` must sit on one of
    lazyxla's devices. In-place ops on the tensor write new buffers: `a` never changes."""
    if not isinstance(a, jax.Array):
        raise TypeError(f"lazyxla: from_jax expects a jax.Array, got a {type(a).__name__}; "
                        "for a host array use torch.from_numpy(x).to(lx.device())")
    if a.is_deleted():
        raise ValueError("lazyxla: from_jax got a deleted jax.Array (it was donated or deleted in JAX)")
    try:
        dtype = torch_dtype(a.dtype)
    except KeyError:
        raise TypeError(f"lazyxla: from_jax: {a.dtype} has no torch dtype on lazyxla; "
                        "convert the array first (a.astype(jnp.float32))") from None
    if placement.spmd_enabled():
        device, sharding = 0, a.sharding
    else:
        devices = a.sharding.device_set
        if len(devices) != 1:
            raise ValueError(
                f"lazyxla: from_jax got an array sharded over {len(devices)} devices; sharded arrays need "
                "SPMD mode (lx.spmd.use_spmd() before creating any lazyxla tensor), else jax.device_put "
                "the array onto one device first")
        local = jax_devices()
        (where,) = devices
        if where not in local:
            raise ValueError(f"lazyxla: from_jax: the array lives on {where}, which is not one of lazyxla's "
                             f"devices ({', '.join(map(str, local))}); jax.device_put it there first")
        device, sharding = local.index(where), None
    data = DeviceData(a, tuple(a.shape), dtype, device, sharding=sharding)
    data.external = "lx.from_jax"
    return adopt(Staged(data, requires_grad))
