"""Sharding recipes (docs/spmd.md): FSDP-style parameter sharding of a module."""
from __future__ import annotations

from typing import Union

import torch

from .api import mark_sharding, sharding_spec
from .mesh import Mesh


def _ways(mesh: Mesh, axis) -> int:
    sizes = mesh.shape()
    ways = 1
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        ways *= sizes[a] if a in sizes else mesh.mesh_shape[a]
    return ways


def shard_parameters(module: torch.nn.Module, mesh: Mesh, axis, *, dim: Union[int, str] = 0,
                     keep_marked: bool = False) -> list:
    """FSDP-style: split every parameter of `module` (already on lx.device()) along one
    dimension over mesh axis `axis` (a name, an index or a tuple of them): `dim` 0, or
    "largest" (the first of its largest dimensions, PyTorch/XLA FSDPv2's choice). A
    parameter whose dimension the axis does not divide, and a 0-d one, stays replicated
    (XLA would pad it; lazyxla's shardings split evenly). `keep_marked`: parameters that
    are sharded already (an inner FSDP unit did it) keep their sharding. Returns the
    names of the parameters sharded here. Gradients and optimizer state created from the
    parameters follow their sharding (GSPMD propagation, `zeros_like` placement)."""
    if dim not in (0, "largest"):
        raise ValueError(f"lazyxla: shard_parameters' dim must be 0 or 'largest', got {dim!r}")
    ways = _ways(mesh, axis)
    sharded = []
    for name, p in module.named_parameters():
        if not p.dim() or (keep_marked and sharding_spec(p) is not None):
            continue
        d = 0 if dim == 0 else list(p.shape).index(max(p.shape))
        if p.shape[d] % ways == 0:
            spec = [None] * p.dim()
            spec[d] = axis
            mark_sharding(p, mesh, tuple(spec))
            sharded.append(name)
    return sharded
