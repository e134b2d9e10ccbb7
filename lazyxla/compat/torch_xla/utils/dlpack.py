"""`torch_xla.utils.dlpack`: importable; `to_dlpack` / `from_dlpack` (sharing a device
buffer with another framework) are not mapped yet: lazyxla has no public call that
hands out a tensor's device buffer. Each raises UnsupportedError naming it; a tensor
goes to another framework through the host (`t.cpu()`, then that framework's
`from_dlpack`)."""
from __future__ import annotations

from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
