"""SPMD: one program over many devices (API.md "SPMD and many processes").

`use_spmd()` makes `lx.device()` a virtual device over every device of every
process; `mark_sharding(t, mesh, spec)` shards a tensor; GSPMD (through
`jax.jit` in/out shardings) partitions each graph. docs/spmd.md has the
data-parallel and FSDP recipes.
"""
from .api import clear_sharding, is_spmd, local_shards, mark_sharding, sharding_spec, use_spmd
from .mesh import Mesh, get_1d_mesh, get_global_mesh, set_global_mesh
from .recipes import shard_parameters

__all__ = ["use_spmd", "is_spmd", "Mesh", "get_1d_mesh", "set_global_mesh", "get_global_mesh",
           "mark_sharding", "clear_sharding", "sharding_spec", "local_shards", "shard_parameters"]
