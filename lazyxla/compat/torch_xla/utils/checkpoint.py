"""`torch_xla.utils.checkpoint`: activation checkpointing whose backward re-run XLA does
not merge back into the forward (lx.utils.checkpoint; lazyxla/recompute.py says how)."""
from __future__ import annotations

import lazyxla as lx

from ...unsupported import unsupported_names

checkpoint = lx.utils.checkpoint   # reentrant by default, as upstream's

__getattr__ = unsupported_names(__name__)
