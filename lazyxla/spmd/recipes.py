"""Sharding recipes (docs/spmd.md): FSDP-style parameter sharding of a module."""
from __future__ import annotations

import torch

from .api import mark_sharding
from .mesh import Mesh


def shard_parameters(module: torch.nn.Module, mesh: Mesh, axis) -> list:
    """FSDP-style: split every parameter of `module` (already on lx.device()) along its
    first dimension over mesh axis `axis` (a name, an index or a tuple of them), leaving
    parameters whose first dimension the axis does not divide replicated. Returns the
    names of the sharded parameters. Gradients and optimizer state created from the
    parameters follow their sharding (GSPMD propagation, `zeros_like` placement)."""
    axes = axis if isinstance(axis, tuple) else (axis,)
    sizes = mesh.shape()
    ways = 1
    for a in axes:
        ways *= sizes[a] if a in sizes else mesh.mesh_shape[a]
    sharded = []
    for name, p in module.named_parameters():
        if p.dim() and p.shape[0] % ways == 0:
            mark_sharding(p, mesh, (axis,) + (None,) * (p.dim() - 1))
            sharded.append(name)
    return sharded
