"""What `import torch_xla` changes in torch's own functions, as upstream's
torch_xla/_patched_functions.py does, while the layer is installed.

`torch.nn.utils.clip_grad_norm_`: with no gradient to clip (no parameter has a
`.grad`), upstream returns the norm 0 as a device tensor, where torch returns a CPU
tensor; so a script that goes on with the result on the device (`norm * lr`) keeps
working. Otherwise torch's own function runs unchanged (lazyxla traces it), where
upstream runs a copy of its own. Upstream's other patch, `nn.GRU` as a scan-based
GRU, is not made: torch's GRU runs on lazyxla as it is.
"""
from __future__ import annotations

import functools
from typing import Callable, List, Optional

import torch

from ._device_names import lazyxla_device

_originals: List[Callable] = []


def _clip_grad_norm_(original: Callable) -> Callable:
    @functools.wraps(original)
    def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                        foreach: Optional[bool] = None) -> torch.Tensor:
        parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if all(p.grad is None for p in parameters):
            return torch.tensor(0.0, device=lazyxla_device())   # upstream's torch.tensor(0.).to('xla')
        return original(parameters, max_norm, norm_type, error_if_nonfinite, foreach)
    clip_grad_norm_.__lazyxla_compat__ = True
    return clip_grad_norm_


def install() -> None:
    """Replace the functions (once; install() again after uninstall() replaces them again)."""
    utils = torch.nn.utils
    if not _originals and not getattr(utils.clip_grad_norm_, "__lazyxla_compat__", False):
        _originals.append(utils.clip_grad_norm_)
        utils.clip_grad_norm_ = _clip_grad_norm_(utils.clip_grad_norm_)


def uninstall() -> None:
    """Put torch's functions back (lazyxla.compat.uninstall)."""
    if _originals:
        torch.nn.utils.clip_grad_norm_ = _originals.pop()
