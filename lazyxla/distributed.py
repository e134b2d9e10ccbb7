"""Many processes: `jax.distributed` for lazyxla (API.md "SPMD and many processes").

Every process runs the same program; after `initialize` and
`lx.spmd.use_spmd()`, `lx.device()` spans the devices of all processes, each
process holds only the shards of its own devices, and host reads of a sharded
tensor return the global value (runtime/transfer.py `download`). JAX's
coordination service and collectives do all communication; on CPU the
collectives are gloo's.
"""
from __future__ import annotations

from typing import Optional

import jax

from . import patches


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, **kwargs) -> None:
    """`jax.distributed.initialize` (arguments as there; None = from the environment, e.g.
    a cluster manager). Must run before any lazyxla tensor exists, since the first
    tensor starts JAX's backend; extra keyword arguments go to JAX unchanged."""
    from jax._src import xla_bridge
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            "lazyxla: lx.distributed.initialize() must be called before any lazyxla tensor or device "
            "query (lx.device(), lx.devices(), ...) starts JAX's backend; call it right after "
            "`import lazyxla`.")
    patches.apply("jax_cpu_collectives")
    jax.distributed.initialize(coordinator_address, num_processes, process_id, **kwargs)


def process_index() -> int:
    return jax.process_index()


def process_count() -> int:
    return jax.process_count()
