"""`torch_xla.test.test_utils`: importable (upstream's tests import it); its helpers
(multiprocess tests, TensorBoard summaries) are not mapped yet."""
from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
