"""torch.optim's multi-tensor ("foreach") path for lazy parameters.

torch.optim picks its foreach implementation by default only for parameters
whose exact type is in `torch.optim.optimizer._foreach_supported_types`
(plain tensors and Parameters) on devices that support foreach kernels (the
PrivateUse1 backend, i.e. lazyxla, is one). Our parameters are `LazyTensor`s,
so we add that type: optimizers then default to foreach on the lazyxla device
(one dispatch per op per parameter group instead of per parameter).
`foreach=False` still selects the per-parameter loop.
"""
from __future__ import annotations

import torch.optim.optimizer as _optimizer

from .tensor import LazyTensor


def enable_foreach_default() -> None:
    supported = _optimizer._foreach_supported_types
    if LazyTensor not in supported:
        supported.append(LazyTensor)
