"""Eager PyTorch on the CPU: the baseline every user starts from."""
from __future__ import annotations

from .torch_backend import TorchBackend


class EagerBackend(TorchBackend):
    name = "eager"
    lazy = False
    foreach = True   # the fastest torch.optim path on the CPU, same math as lazyxla's


Backend = EagerBackend
