"""`torch_xla.experimental.gradient_accumulation`: lx.experimental.gradient_accumulation.

A `train_step` that mutates its inputs raises `InputMutationError` here, lazyxla's
`lx.experimental.InputMutationError` that is also an `AssertionError` (upstream's
check is an `assert`; README.md, "Coming from PyTorch/XLA"), raised rather than
asserted, so `python -O` keeps it; nothing is changed."""
from __future__ import annotations

import functools

from lazyxla import experimental as _lx_experimental

from ...unsupported import unsupported_names


class InputMutationError(_lx_experimental.InputMutationError, AssertionError):
    """`train_step` wrote into one of its inputs: lazyxla's error, caught by
    `except AssertionError` as upstream's assert is."""


@functools.wraps(_lx_experimental.gradient_accumulation)
def gradient_accumulation(train_step, iterable_tensors, model, *carried_tensors):
    try:
        return _lx_experimental.gradient_accumulation(train_step, iterable_tensors, model, *carried_tensors)
    except _lx_experimental.InputMutationError as e:
        raise InputMutationError(str(e)) from e


__getattr__ = unsupported_names(__name__)
