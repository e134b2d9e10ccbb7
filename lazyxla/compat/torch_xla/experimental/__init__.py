"""`torch_xla.experimental`."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
