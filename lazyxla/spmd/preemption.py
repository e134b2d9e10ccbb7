"""Preemption notices (SIGTERM, what clouds send before they take a machine away), for
`CheckpointManager(save_on_preemption=True)` and PyTorch/XLA's preemption sync manager.

* One process: a Python SIGTERM handler records the notice (the process keeps running);
  `reached(step)` is True from the next step on, so the training loop saves at its next
  step barrier and leaves.
* Several processes (`lx.distributed.initialize`): JAX's preemption sync manager (its
  coordination service's handler of SIGTERM) spreads a notice that any process got to all
  of them and agrees on the step to save at: the step after the largest one any process
  has reached. `reached(step)` must then be called at every step by every process, with
  the same step numbers, as `jax.experimental.multihost_utils.reached_preemption_sync_point`.
"""
from __future__ import annotations

import signal
import threading
from typing import Any

from jax.experimental import multihost_utils


class _Listener:
    """Whether this process listens for preemption notices, and SIGTERM's handler before
    ours (one process)."""
    received = threading.Event()
    previous: Any = None
    active = False


_LISTENER = _Listener()


def _multi_process() -> bool:
    from jax._src import distributed   # lazy: JAX's private module; a layout change breaks this call only
    return distributed.global_state.client is not None and (distributed.global_state.num_processes or 1) > 1


def _on_sigterm(signum, frame) -> None:
    _LISTENER.received.set()


def activate() -> None:
    """Start listening for SIGTERM (one process: from the main thread, as Python's signal
    module requires; elsewhere nothing happens). Several processes: JAX listens already."""
    if _LISTENER.active:
        return
    if not _multi_process():
        if threading.current_thread() is not threading.main_thread():
            return
        _LISTENER.previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _LISTENER.active = True


def deactivate() -> None:
    """Stop listening (one process: SIGTERM's previous handler is back) and forget a notice."""
    if not _LISTENER.active:
        return
    if _LISTENER.previous is not None:
        signal.signal(signal.SIGTERM, _LISTENER.previous)
    _LISTENER.active, _LISTENER.previous = False, None
    _LISTENER.received.clear()


def is_active() -> bool:
    return _LISTENER.active


def reached(step: int) -> bool:
    """True when the checkpoint of `step` is the one to take before the process is stopped
    (module docstring); False while not activated."""
    if not _LISTENER.active:
        return False
    if _multi_process():
        return bool(multihost_utils.reached_preemption_sync_point(step))
    return _LISTENER.received.is_set()
