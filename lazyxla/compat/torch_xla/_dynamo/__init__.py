"""`torch_xla._dynamo`."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
