"""`torch_xla.experimental.distributed_checkpoint`: lx.spmd.checkpoint under upstream's
names. `SPMDSavePlanner` / `SPMDLoadPlanner` are lazyxla's DCP planners (with upstream's
`sharded_state_dict` / `unsharded_state_dict` split), `prime_optimizer` is lazyxla's, and
`CheckpointManager` (manager.py) saves and restores through them."""
from __future__ import annotations

from lazyxla.spmd import checkpoint as _ck

from ....unsupported import unsupported_names
from .manager import CheckpointManager  # noqa: F401

SPMDSavePlanner = _ck.SavePlanner
SPMDLoadPlanner = _ck.LoadPlanner
prime_optimizer = _ck.prime_optimizer

__all__ = ["CheckpointManager", "SPMDSavePlanner", "SPMDLoadPlanner", "prime_optimizer"]

__getattr__ = unsupported_names(__name__)
