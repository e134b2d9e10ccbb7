"""Many processes: `jax.distributed` for lazyxla (docs/spmd.md, "Many processes").

Every process runs the same program; after `initialize` and
`lx.spmd.use_spmd()`, `lx.device()` spans the devices of all processes, each
process holds only the shards of its own devices, and host reads of a sharded
tensor return the global value (runtime/transfer.py `download`). JAX's
coordination service and collectives do all communication; on CPU the
collectives are gloo's. A process that stops is noticed by every other one within
`heartbeat_timeout_seconds` (liveness.py): each raises `ProcessLostError` and exits
non-zero.
"""
from __future__ import annotations

import os
import socket
from typing import Optional

import jax

from .. import config, patches
from . import liveness
from .liveness import EXIT_STATUS, ProcessLostError

__all__ = ["initialize", "process_index", "process_count", "ProcessLostError", "EXIT_STATUS"]


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *, heartbeat_timeout_seconds: int = 100,
               initialization_timeout: int = 300, shutdown_timeout_seconds: int = 300, **kwargs) -> None:
    """`jax.distributed.initialize` (arguments as there; None = from the environment:
    `JAX_COORDINATOR_ADDRESS`, or a cluster manager JAX detects). Must run before any lazyxla
    tensor exists, since the first tensor starts JAX's backend; extra keyword arguments go
    to JAX unchanged.

    Timeouts, in seconds:
    * `heartbeat_timeout_seconds`: when another process has sent no heartbeat for this long
      (killed, crashed, host lost), this process raises `ProcessLostError` naming it, and
      exits with status `EXIT_STATUS` (75) at most min(10 s, the timeout) later if still
      running. JAX's own coordination service gets twice this plus 10 s as a backstop; it
      aborts the process (SIGABRT) if lazyxla's watchdog could not act. When the
      coordinator (process 0) dies, JAX's client aborts the others at once (SIGABRT, "the
      leader task was preempted/died"): that happens in C++, before lazyxla can act.
    * `initialization_timeout`: how long to wait for all processes to connect.
    * `shutdown_timeout_seconds`: how long a finished process waits for the others at exit.
    """
    # lazy: JAX's private modules; a change of their layout breaks this call only, not `import lazyxla`
    from jax._src import distributed as jax_distributed
    from jax._src import xla_bridge
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            "lazyxla: lx.distributed.initialize() must be called before any lazyxla tensor or device "
            "query (lx.device(), lx.devices(), ...) starts JAX's backend; call it right after "
            "`import lazyxla`.")
    if heartbeat_timeout_seconds < 1:
        raise ValueError(f"lazyxla: heartbeat_timeout_seconds must be >= 1, got {heartbeat_timeout_seconds}")
    patches.apply("jax_cpu_collectives")
    address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    if address:
        patches.apply("jax_gloo_address", local_address_towards(address))
    jax.distributed.initialize(coordinator_address, num_processes, process_id,
                               heartbeat_timeout_seconds=liveness.backstop_seconds(heartbeat_timeout_seconds),
                               initialization_timeout=initialization_timeout,
                               shutdown_timeout_seconds=shutdown_timeout_seconds, **kwargs)
    state = jax_distributed.global_state
    if state.num_processes > 1:
        liveness.start(state.client, state.process_id, state.num_processes, state.coordinator_address,
                       heartbeat_timeout_seconds)


def local_address_towards(coordinator_address: str) -> str:
    """This machine's address on the route to `host:port` (no packet is sent): the address
    gloo advertises to the other processes. `LAZYXLA_GLOO_HOSTNAME` overrides it."""
    if config.SETTINGS.gloo_hostname:
        return config.SETTINGS.gloo_hostname
    host, _, port = coordinator_address.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, int(port)))
            return s.getsockname()[0]
        except OSError:
            return socket.gethostname()


def process_index() -> int:
    return jax.process_index()


def process_count() -> int:
    return jax.process_count()
