"""Preemption notices (`torch_xla._XLAC._activate_preemption_sync_manager`,
`_sync_point_reached`, CheckpointManager's `chkpt_on_preemption`): lazyxla's
`lx.spmd.preemption` (a SIGTERM handler in one process, JAX's preemption sync manager,
which agrees on the step across processes, in several)."""
from __future__ import annotations

import lazyxla as lx


def activate() -> None:
    lx.spmd.preemption.activate()


def deactivate() -> None:
    lx.spmd.preemption.deactivate()


def sync_point_reached(step: int) -> bool:
    """True at the step to checkpoint once a SIGTERM arrived after activation."""
    return lx.spmd.preemption.reached(step)
