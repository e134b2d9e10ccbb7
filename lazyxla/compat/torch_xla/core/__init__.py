"""`torch_xla.core`."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
