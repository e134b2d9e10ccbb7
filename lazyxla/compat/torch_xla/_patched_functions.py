"""What `import torch_xla` changes in torch's own functions, as upstream's
torch_xla/_patched_functions.py does, while the layer is installed.

`torch.nn.utils.clip_grad_norm_`: with no gradient to clip (no parameter has a
`.grad`), upstream returns the norm 0 as a device tensor, where torch returns a CPU
tensor; so a script that goes on with the result on the device (`norm * lr`) keeps
working. Otherwise torch's own function runs unchanged (lazyxla traces it), where
upstream runs a copy of its own. Upstream's other patch, `nn.GRU` as a scan-based
GRU, is not made: torch's GRU runs on lazyxla as it is.

`torch.nn.functional.nll_loss` (and so `nn.NLLLoss`): upstream's kernel takes a
floating-point target of class indices, as its tests use (`target =
torch.zeros(32).to(device)`), where eager PyTorch and plain lazyxla raise "expected
target dtype to be Long or Byte"; under the layer a floating target of a device input
is cast to int64 first (its values truncated, as upstream's cast does).

torch's lists of the device types with foreach and fused optimizer kernels
(`torch.utils._foreach_utils`, and their names in `torch.optim.optimizer`) gain
"xla": lazyxla tensors read their type as "xla" under the layer (_device_names.py),
and without it torch.optim and `clip_grad_norm_` would leave lazyxla's multi-tensor
paths (one traced op per tensor instead of one per group) that they take for the type
"lazyxla".
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, List, Optional, Tuple

import torch

import lazyxla as lx

from ._device_names import lazyxla_device

_originals: List[Tuple[Any, str, Callable]] = []


def _clip_grad_norm_(original: Callable) -> Callable:
    @functools.wraps(original)
    def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                        foreach: Optional[bool] = None) -> torch.Tensor:
        parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if all(p.grad is None for p in parameters):
            return torch.tensor(0.0, device=lazyxla_device())   # upstream's torch.tensor(0.).to('xla')
        return original(parameters, max_norm, norm_type, error_if_nonfinite, foreach)
    return clip_grad_norm_


def _nll_loss(original: Callable) -> Callable:
    @functools.wraps(original)
    def nll_loss(input, target, *args, **kwargs):
        if target.is_floating_point() and isinstance(input, lx.LazyTensor):
            target = target.long()
        return original(input, target, *args, **kwargs)
    return nll_loss


def _with_xla(original: Callable) -> Callable:
    @functools.wraps(original)
    def supported_devices() -> List[str]:
        return [*original(), "xla"]
    return supported_devices


# (module, attribute, wrapper factory) of each replaced function; one a torch release
# lacks is left out
_PATCHES = ((torch.nn.utils, "clip_grad_norm_", _clip_grad_norm_),
            (torch.nn.functional, "nll_loss", _nll_loss),
            *((module, name, _with_xla)
              for module in map(importlib.import_module, ("torch.utils._foreach_utils", "torch.optim.optimizer"))
              for name in ("_get_foreach_kernels_supported_devices", "_get_fused_kernels_supported_devices")))


def install() -> None:
    """Replace the functions (once; install() again after uninstall() replaces them again)."""
    if _originals:
        return
    for module, name, wrap in _PATCHES:
        original = getattr(module, name, None)
        if original is None:
            continue
        _originals.append((module, name, original))
        patched = wrap(original)
        patched.__lazyxla_compat__ = True
        setattr(module, name, patched)


def uninstall() -> None:
    """Put torch's functions back (lazyxla.compat.uninstall)."""
    while _originals:
        module, name, original = _originals.pop()
        setattr(module, name, original)
