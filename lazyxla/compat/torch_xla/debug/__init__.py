"""`torch_xla.debug`."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
