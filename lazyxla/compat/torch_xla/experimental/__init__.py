"""`torch_xla.experimental`: eager mode (lx.experimental.eager_mode)."""
from lazyxla.experimental import eager_mode, eager_mode_context, is_eager_mode  # noqa: F401

from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
