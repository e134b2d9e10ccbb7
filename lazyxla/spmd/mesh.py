"""`lx.spmd.Mesh`: PyTorch/XLA's device mesh, backed by a `jax.sharding.Mesh`.

Device ids are global device indices (`jax.devices()` order, every process's
devices). A mesh made without axis names gets JAX axis names `_0`, `_1`, ...;
partition specs then address its axes by index, and `sharding_spec` reports
indices for them.
"""
from __future__ import annotations

import collections
import math
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh as JaxMesh

from ..runtime import placement
from ..state import STATE

_UNNAMED = "_"


class Mesh:
    """`Mesh(device_ids, mesh_shape, axis_names=None)` as `torch_xla.distributed.spmd.Mesh`."""

    def __init__(self, device_ids: Sequence[int], mesh_shape: tuple,
                 axis_names: Optional[Sequence[str]] = None) -> None:
        ids = np.asarray(device_ids, dtype=np.int64).reshape(-1)
        mesh_shape = tuple(int(n) for n in mesh_shape)
        count = jax.device_count()
        if ids.size != math.prod(mesh_shape):
            raise ValueError(f"lazyxla: a mesh of shape {mesh_shape} needs {math.prod(mesh_shape)} device "
                             f"ids, got {ids.size}; pass as many ids as the shape has places")
        if ids.size > count or (ids.size and (ids.min() < 0 or ids.max() >= count)):
            raise ValueError(f"lazyxla: the mesh uses device ids {ids.tolist()} but there are only {count} "
                             f"devices (ids 0..{count - 1}, all processes); make a smaller mesh, e.g. "
                             f"lx.spmd.Mesh(range({count}), ({count},))")
        if len(set(ids.tolist())) != ids.size:
            raise ValueError(f"lazyxla: the mesh lists a device twice: {ids.tolist()}; give each device once")
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape) or len(set(axis_names)) != len(axis_names):
                raise ValueError(f"lazyxla: axis_names {axis_names} must name each of the {len(mesh_shape)} "
                                 "mesh axes once")
            if any(not isinstance(n, str) or n.startswith(_UNNAMED) for n in axis_names):
                raise ValueError(f"lazyxla: axis names must be strings not starting with '{_UNNAMED}', "
                                 f"got {axis_names}")
        self.device_ids = ids
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names
        devices = jax.devices()
        names = axis_names or tuple(f"{_UNNAMED}{i}" for i in range(len(mesh_shape)))
        self.jax_mesh = JaxMesh(np.array([devices[i] for i in ids], dtype=object).reshape(mesh_shape), names)

    def size(self) -> int:
        return int(self.device_ids.size)

    def shape(self) -> "collections.OrderedDict[object, int]":
        """Axis name (or index, for an unnamed mesh) -> size, as torch_xla."""
        keys = self.axis_names or range(len(self.mesh_shape))
        return collections.OrderedDict(zip(keys, self.mesh_shape))

    def get_logical_mesh(self) -> np.ndarray:
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name: str) -> int:
        if self.axis_names is None or name not in self.axis_names:
            raise ValueError(f"lazyxla: the mesh has no axis named {name!r}; its axes are "
                             f"{self.axis_names or 'unnamed (use indices)'}")
        return self.axis_names.index(name)

    def __eq__(self, other) -> bool:
        return isinstance(other, Mesh) and self.jax_mesh == other.jax_mesh and self.axis_names == other.axis_names

    def __hash__(self) -> int:
        return hash((self.jax_mesh, self.axis_names))

    def __repr__(self) -> str:
        return f"Mesh(device_ids={self.device_ids.tolist()}, mesh_shape={self.mesh_shape}, axis_names={self.axis_names})"


def get_1d_mesh(axis_name: Optional[str] = None) -> Mesh:
    """All devices of all processes on one axis."""
    n = jax.device_count()
    return Mesh(range(n), (n,), (axis_name,) if axis_name is not None else None)



def set_global_mesh(mesh: Mesh) -> None:
    if not isinstance(mesh, Mesh):
        raise TypeError(f"lazyxla: set_global_mesh expects an lx.spmd.Mesh, got {type(mesh).__name__}")
    STATE.set("global_mesh", mesh)   # the run-time state (lazyxla/state.py)
    if placement.spmd_enabled():
        # Unmarked tensors made from now on are replicated over this mesh, so they can
        # meet tensors marked with it even if it orders the devices its own way.
        placement.set_replicated_mesh(mesh.jax_mesh)


def get_global_mesh() -> Optional[Mesh]:
    return STATE.global_mesh


def axis_label(name: str):
    """What sharding_spec reports for a JAX axis name: the name, or the index of an unnamed axis."""
    index = name[len(_UNNAMED):]
    return int(index) if name.startswith(_UNNAMED) and index.isdigit() else name
