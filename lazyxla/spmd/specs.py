"""Partition specs: PyTorch/XLA's spelling -> `jax.sharding.PartitionSpec`.

One entry per tensor dimension: a mesh-axis index, an axis name, None
(replicated along that dimension) or a tuple of those (the dimension split
over several axes, major to minor). Checked here so that every mistake is a
`ValueError` naming the fix before any buffer moves.
"""
from __future__ import annotations

import math
from typing import Optional

from jax.sharding import NamedSharding, PartitionSpec

from .mesh import Mesh, axis_label


def _axis(mesh: Mesh, entry, dim: int) -> str:
    names = mesh.jax_mesh.axis_names
    if isinstance(entry, bool) or not isinstance(entry, (int, str)):
        raise ValueError(f"lazyxla: partition spec entry {entry!r} for dimension {dim} must be a mesh-axis "
                         "index, an axis name, None or a tuple of those")
    if isinstance(entry, int):
        if not 0 <= entry < len(names):
            raise ValueError(f"lazyxla: partition spec entry {entry} for dimension {dim} is not a mesh axis; "
                             f"the mesh has axes 0..{len(names) - 1} (shape {mesh.mesh_shape})")
        return names[entry]
    if mesh.axis_names is None or entry not in mesh.axis_names:
        raise ValueError(f"lazyxla: unknown mesh axis name {entry!r} in the partition spec (dimension {dim}); "
                         f"the mesh's axes are {mesh.axis_names or 'unnamed: use indices 0..' + str(len(names) - 1)}")
    return entry


def named_sharding(mesh: Mesh, spec, shape: tuple) -> NamedSharding:
    """The JAX sharding of a tensor of `shape` marked with `spec` over `mesh`."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"lazyxla: expected an lx.spmd.Mesh, got {type(mesh).__name__}")
    spec = tuple(spec)
    if len(spec) != len(shape):
        raise ValueError(f"lazyxla: the partition spec {spec} has {len(spec)} entries but the tensor has "
                         f"{len(shape)} dimensions (shape {list(shape)}); give one entry per dimension "
                         "(None for a dimension that is not split)")
    sizes = dict(zip(mesh.jax_mesh.axis_names, mesh.mesh_shape))
    entries: list = []
    used: set = set()
    for dim, entry in enumerate(spec):
        if entry is None:
            entries.append(None)
            continue
        axes = tuple(_axis(mesh, e, dim) for e in (entry if isinstance(entry, tuple) else (entry,)))
        for a in axes:
            if a in used:
                raise ValueError(f"lazyxla: mesh axis {axis_label(a)!r} appears twice in the "
                                 f"partition spec {spec}; each axis may split one dimension")
            used.add(a)
        ways = math.prod(sizes[a] for a in axes)
        if shape[dim] % ways:
            raise ValueError(f"lazyxla: dimension {dim} of size {shape[dim]} cannot be split {ways} ways "
                             f"(partition spec {spec}, mesh shape {mesh.mesh_shape}); choose axes whose sizes "
                             "divide it, or None for that dimension")
        entries.append(axes[0] if len(axes) == 1 else axes)
    return NamedSharding(mesh.jax_mesh, PartitionSpec(*entries))


def spec_of(sharding, rank: int) -> Optional[tuple]:
    """The partition spec of `sharding` as a tuple of `rank` entries, None if replicated."""
    spec = getattr(sharding, "spec", None)
    if spec is None or sharding.is_fully_replicated:
        return None

    def label(entry):
        if entry is None:
            return None
        if isinstance(entry, tuple):
            return tuple(axis_label(a) for a in entry) if len(entry) > 1 else axis_label(entry[0])
        return axis_label(entry)

    entries = [label(e) for e in spec]
    return tuple(entries + [None] * (rank - len(entries)))
