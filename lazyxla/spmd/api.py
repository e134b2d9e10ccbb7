"""SPMD mode and marking tensors (docs/spmd.md).

Marking device data gives the tensor a new buffer with the new sharding (the
old one is freed when nothing else holds it; a staged upload is just placed
by slices later, see DeviceData.host). Marking pending computation writes a
sharding-constraint node over it: GSPMD partitions the graph accordingly and
the result keeps that sharding. Both are writes of the tensor's storage, so
views re-derive from the marked value.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..frontend.device import reset_devices
from ..frontend.storage import live_devices, live_storages
from ..frontend.tensor import LazyTensor
from ..ir.build import data_node, op_node
from ..ir.node import DATA, SHARDING_CONSTRAINT, Node
from ..lock import LOCK
from ..runtime import placement
from ..runtime.device_data import DeviceData
from ..runtime.transfer import download, reshard
from ..sync.api import sync_tensors
from .mesh import Mesh, get_global_mesh
from .specs import named_sharding, spec_of


def use_spmd() -> None:
    """Make `lx.device()` one virtual device over all devices of all processes."""
    with LOCK:
        if placement.spmd_enabled():
            return
        if any(live_storages(d) for d in live_devices()):
            raise RuntimeError(
                "lazyxla: lx.spmd.use_spmd() must be called before any lazyxla tensor exists (tensors "
                "already on a device would keep their single-device placement). Call it right after "
                "`import lazyxla` (and lx.distributed.initialize), before creating tensors or moving "
                "models to lx.device().")
        placement.enable_spmd()
        mesh = get_global_mesh()
        if mesh is not None:
            placement.set_replicated_mesh(mesh.jax_mesh)
        reset_devices()


def is_spmd() -> bool:
    return placement.spmd_enabled()


def _base(t, what: str, views: bool = False) -> LazyTensor:
    if not isinstance(t, LazyTensor):
        kind = f"a {t.device} tensor" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
        raise TypeError(f"lazyxla: {what} expects a lazyxla tensor, got {kind}; move it to the device "
                        "first (t.to(lx.device())), then mark it")
    if not placement.spmd_enabled():
        raise RuntimeError(f"lazyxla: {what} needs SPMD mode; call lx.spmd.use_spmd() before creating "
                           "any lazyxla tensor")
    if t._view is not None and not views and not _is_alias(t):
        raise ValueError(f"lazyxla: {what} of a view (shape {list(t.shape)}) is not supported: the sharding "
                         "belongs to the whole tensor; mark the base tensor it was taken from")
    return t


def _is_alias(t: LazyTensor) -> bool:
    """A view that is its whole base in the base's own layout (`detach()`, the output of
    a module with a full backward hook): marking it is marking the base."""
    return t._view is not None and t._mkey == t._st.base_spec


def _whole(t: LazyTensor) -> LazyTensor:
    """The base tensor of an alias view (`t` itself when it is a base)."""
    if t._view is None:
        return t
    st = t._st
    return LazyTensor.wrap(st, None, st.value, st.base_spec)


def _constrain(value: Node, sharding) -> Node:
    if value.op is SHARDING_CONSTRAINT:   # re-marking pending IR replaces the constraint
        value = value.inputs[0]
    return op_node(SHARDING_CONSTRAINT, (value, sharding), None, value.shape, value.dtype)


def _place(t: LazyTensor, sharding) -> LazyTensor:
    with LOCK:
        st = t._st
        value = t.checked_value()
        if value.op is DATA:
            old = value.data
            if old.sharding == sharding:
                return t
            if old.host is not None:   # not placed yet: place only the slices, at first use
                new = DeviceData(None, old.shape, old.dtype, old.device, owner=st, sharding=sharding,
                                 host=old.host, stored_dtype=old.stored_dtype)
            else:
                new = DeviceData(reshard(old.live_array(), sharding), old.shape, old.dtype, old.device,
                                 owner=st, sharding=sharding, stored_dtype=old.stored_dtype)
            new.donate = old.donate   # the user's donation mark follows the tensor's value
            st.write(data_node(new))
        else:
            st.write(_constrain(value, sharding))
    return t


def mark_sharding(t: torch.Tensor, mesh: Mesh, partition_spec) -> torch.Tensor:
    """Shard `t` over `mesh`: one spec entry per dimension (axis index, axis name, None,
    or a tuple of those). Returns `t`."""
    t = _base(t, "mark_sharding")
    _place(_whole(t), named_sharding(mesh, partition_spec, tuple(t.shape)))
    return t


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    """Back to replicated. Returns `t`."""
    t = _base(t, "clear_sharding")
    _place(_whole(t), placement.replicated())
    return t


def sharding_spec(t: torch.Tensor) -> Optional[tuple]:
    """The partition spec of `t` (axis names; indices for an unnamed mesh), or None when
    replicated. Pending results that nobody marked report None until a sync decides
    their sharding, and so does a view (e.g. a transposed `.grad`): the sharding belongs
    to its base tensor."""
    t = _base(t, "sharding_spec", views=True)
    if t._view is not None:
        if not _is_alias(t):
            return None
        t = _whole(t)
    value = t.checked_value()
    if value.op is DATA:
        return spec_of(placement.sharding_of(value.data), t.dim())
    if value.op is SHARDING_CONSTRAINT:
        return spec_of(value.args[1], t.dim())
    return None


def local_shards(t: torch.Tensor) -> list:
    """CPU copies of the shards of `t` on this process's devices, in device order."""
    t = _base(t, "local_shards")
    if t.checked_value().op is not DATA:
        sync_tensors([t], donate_inplace=False)
    with LOCK:
        array = t.checked_value().data.live_array()
        shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
        return [download(s.data, t.dtype) for s in shards]
