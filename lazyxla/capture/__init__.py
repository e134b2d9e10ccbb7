"""Function capture: run a function over lazy tensors once and replay it as one CALL
node per call; torch.compile (dynamo/), the loop constructs (experimental/) and
`lx.call_jax` (jax_interop/) build on it."""
from ..sync.placeholders import CaptureError, InputMutationError, Placeholder
from .function import Capture, capture, insert_call

__all__ = ["Capture", "CaptureError", "InputMutationError", "Placeholder", "capture", "insert_call"]
