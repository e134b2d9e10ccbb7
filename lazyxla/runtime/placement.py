"""Where buffers live: one local device each, or (SPMD mode) the whole device set.

Without SPMD every lazyxla device is one local JAX device and a buffer's
placement is implied by its device index (`DeviceData.sharding` is None). In
SPMD mode (`lx.spmd.use_spmd()`) lazyxla device 0 stands for every device of
every process: each buffer carries a `jax.sharding.Sharding` over those
devices, replicated unless the user marked it, and compiled graphs take and
produce arrays with those shardings (GSPMD partitions the program).

The state is the run-time state's `spmd_replicated` mode (lazyxla/state.py): None, or
the placement of unmarked tensors. The mesh and spec vocabulary lives in `lazyxla/spmd/`,
above the runtime.
"""
from __future__ import annotations


import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from .._jax import jax_devices
from ..state import STATE


def enable_spmd() -> None:
    """Make device 0 span all devices of all processes (the caller checked it is safe)."""
    devices = np.array(jax.devices())
    STATE.set("spmd_replicated", NamedSharding(Mesh(devices, ("_all",)), PartitionSpec()))


def spmd_enabled() -> bool:
    return STATE.spmd_replicated is not None


def replicated() -> NamedSharding:
    """The placement of an unmarked tensor in SPMD mode (a full copy on every device)."""
    replicated = STATE.spmd_replicated
    if replicated is None:
        raise RuntimeError("lazyxla: SPMD is not enabled; call lx.spmd.use_spmd() first")
    return replicated


def set_replicated_mesh(mesh: Mesh) -> None:
    """Unmarked tensors are replicated over `mesh` from now on (lx.spmd.set_global_mesh):
    one program may only mix meshes that order the same devices the same way, so
    a global mesh with its own device order must also be the replicated one's."""
    STATE.set("spmd_replicated", NamedSharding(mesh, PartitionSpec()))


def default_sharding(device: int) -> Sharding:
    """Placement of a buffer on lazyxla `device` that nobody marked."""
    replicated = STATE.spmd_replicated
    if replicated is not None:
        return replicated
    return SingleDeviceSharding(jax_devices()[device])


def sharding_of(data) -> Sharding:
    """The placement of a `DeviceData`'s buffer."""
    return data.sharding if data.sharding is not None else default_sharding(data.device)


def device_order(sharding: Sharding) -> tuple:
    """Ids of the devices of `sharding` in its mesh's order (what jit compares)."""
    mesh = getattr(sharding, "mesh", None)
    if mesh is None:
        return tuple(d.id for d in sharding._device_assignment)
    return tuple(d.id for d in mesh.devices.flat)
