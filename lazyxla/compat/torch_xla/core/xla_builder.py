"""`torch_xla.core.xla_builder`: importable, nothing mapped.

Upstream's test_while_loop.py imports it without using it; lazyxla builds XLA
computations from traced PyTorch code, not from a builder API, so every name of
this module raises `UnsupportedError` naming it."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
