"""`lx.spmd.ShardingSpec`: a partition spec bound to a mesh, for tensors not made yet.

PyTorch/XLA's `ShardingSpec(mesh, partition_spec, minibatch=False)`: the data
loader's `input_sharding` (lx.data.DeviceLoader's `sharding`) places every batch
tensor of the spec's rank with it as the tensor is uploaded, so a batch is never
first copied whole to every device. `minibatch=True`: each process loads only its
own part of the global batch (dimension 0), as upstream.
"""
from __future__ import annotations

import dataclasses

import jax
import torch
from jax.sharding import NamedSharding

from .api import mark_sharding
from .mesh import Mesh
from .specs import named_sharding


@dataclasses.dataclass(frozen=True)
class ShardingSpec:
    mesh: Mesh
    partition_spec: tuple
    minibatch: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, Mesh):
            raise TypeError(f"lazyxla: ShardingSpec expects an lx.spmd.Mesh, got {type(self.mesh).__name__}")
        object.__setattr__(self, "partition_spec", tuple(self.partition_spec))
        # every entry checked against the mesh now: each dimension sized so that any axes divide it
        named_sharding(self.mesh, self.partition_spec, (self.mesh.size(),) * len(self.partition_spec))

    def can_apply(self, t: torch.Tensor) -> bool:
        """Whether the spec fits `t` (upstream's rule: one entry per dimension); a
        loader leaves tensors it does not fit replicated."""
        return len(t.shape) == len(self.partition_spec)

    def sharding_for(self, t: torch.Tensor) -> NamedSharding:
        """The placement of the global tensor that `t` (this process's part, with
        `minibatch`) becomes."""
        shape = tuple(t.shape)
        if self.minibatch and shape:
            local = jax.local_device_count()
            if shape[0] % local:
                raise RuntimeError(
                    f"lazyxla: with minibatch=True the per-process batch size must be divisible by the "
                    f"number of local devices; the batch tensor has shape {list(shape)} and there are "
                    f"{local} local devices")
            shape = (shape[0] * jax.process_count(),) + shape[1:]
        return named_sharding(self.mesh, self.partition_spec, shape)

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        """Shard lazyxla tensor `t` in place (lx.spmd.mark_sharding)."""
        return mark_sharding(t, self.mesh, self.partition_spec)
