"""`torch_xla.experimental.gradient_accumulation`: lx.experimental.gradient_accumulation.

One difference: a `train_step` that mutates its inputs raises
`lx.experimental.InputMutationError` (upstream: a bare `assert`, an
AssertionError that `python -O` silently drops) and changes nothing."""
from __future__ import annotations

from lazyxla.experimental import InputMutationError, gradient_accumulation  # noqa: F401

from ...unsupported import unsupported_names

__getattr__ = unsupported_names(__name__)
