"""`torch_xla._dynamo.dynamo_bridge`: the names scripts import from it. The bridge
itself is lazyxla's dynamo backend (`backend="openxla"`, lazyxla.compat.registrations)."""
from __future__ import annotations

from ..utils.buffer_donor_context import alias_with_buffer_donor_config  # noqa: F401
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
