"""`torch_xla.amp.syncfree`: `SGD`, `Adam`, `AdamW` are torch.optim's.

Upstream's versions take GradScaler's `found_inf` as a device tensor and skip the
update inside the graph, so a step with GradScaler never waits for the device.
torch.optim's are used here: GradScaler reads `found_inf` on the host before each
step (one small transfer and a wait per step), with the same results."""
from __future__ import annotations

from torch.optim import SGD, Adam, AdamW  # noqa: F401

from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
