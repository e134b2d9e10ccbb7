"""`torch_xla.utils`."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
