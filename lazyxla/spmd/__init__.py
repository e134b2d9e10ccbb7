"""SPMD: one program over many devices (docs/spmd.md).

`use_spmd()` makes `lx.device()` a virtual device over every device of every
process; `mark_sharding(t, mesh, spec)` shards a tensor; GSPMD (through
`jax.jit` in/out shardings) partitions each graph. docs/spmd.md has the
data-parallel and FSDP recipes; `lx.spmd.checkpoint` saves and loads sharded state
with torch.distributed.checkpoint, and `lx.spmd.CheckpointManager` keeps numbered,
atomically committed checkpoints and saves on a preemption notice (`lx.spmd.preemption`).
"""
import importlib

from .api import clear_sharding, is_spmd, local_shards, mark_sharding, sharding_spec, use_spmd
from .mesh import Mesh, get_1d_mesh, get_global_mesh, set_global_mesh
from .recipes import shard_parameters
from .input_spec import ShardingSpec



def __getattr__(name: str):
    # lx.spmd.checkpoint imports torch.distributed.checkpoint: loaded on first use.
    if name in ("checkpoint", "preemption"):
        return importlib.import_module(f".{name}", __name__)
    if name == "CheckpointManager":
        return importlib.import_module(".manager", __name__).CheckpointManager
    raise AttributeError(f"module 'lazyxla.spmd' has no attribute {name!r}")


__all__ = ["use_spmd", "is_spmd", "Mesh", "get_1d_mesh", "set_global_mesh", "get_global_mesh",
           "mark_sharding", "clear_sharding", "sharding_spec", "local_shards", "shard_parameters", "ShardingSpec",
           "checkpoint", "CheckpointManager", "preemption"]
