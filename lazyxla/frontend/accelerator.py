"""lazyxla as torch's current accelerator: `torch.accelerator.*` and pinned host memory.

Once lazyxla renames PrivateUse1, torch takes it for the process's accelerator, and
answers accelerator questions through C++ hooks a Python backend cannot register. So:
* the patch "torch_accelerator_hooks" (lazyxla/patches) routes each of torch.accelerator's
  `torch._C._accelerator_*` calls, while lazyxla is the current accelerator, to the same
  function of `torch.lazyxla` (device_module.py), whose figures come from the runtime's
  ledger of live buffers;
* lazyxla's CPU kernel for `aten::_pin_memory` makes a pin for lazyxla a pageable copy (a
  new tensor, as torch's is); a pin for another device type goes to torch's kernel.
  `torch.empty(..., pin_memory=True)` still fails with torch's message.

Design: docs/design.md, "lazyxla as torch's accelerator" and "frontend/accelerator.py".
"""
from __future__ import annotations

import torch

from .. import patches
from . import device_module as lazyxla_module
from .device import DEVICE_TYPE

_PIN = torch.ops.aten._pin_memory.default
_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _lazyxla_current() -> bool:
    current = torch._C._get_accelerator()
    return current is not None and current.type == DEVICE_TYPE


# torch._C's entry point -> lazyxla's answer, each taking torch's arguments.
_ANSWERS = {
    "_accelerator_isAllocatorInitialized": lambda: True,
    "_accelerator_emptyCache": lazyxla_module.empty_cache,
    "_accelerator_emptyHostCache": lambda: None,   # no host cache: pins are plain copies
    "_accelerator_getDeviceStats": lazyxla_module.memory_stats,
    "_accelerator_resetAccumulatedStats": lazyxla_module.reset_accumulated_memory_stats,
    "_accelerator_resetPeakStats": lazyxla_module.reset_peak_memory_stats,
    "_accelerator_getMemoryInfo": lazyxla_module.mem_get_info,
    "_accelerator_synchronizeDevice": lazyxla_module.synchronize,
}


def _routed(name: str):
    answer = _ANSWERS[name]

    def wrapper(original):
        def entry(*args):
            return answer(*args) if _lazyxla_current() else original(*args)
        entry.__name__ = name
        return entry
    return wrapper


def _pin_memory(tensor: torch.Tensor, device=None) -> torch.Tensor:
    for_lazyxla = _lazyxla_current() if device is None else torch.device(device).type == DEVICE_TYPE
    return tensor.clone() if for_lazyxla else _PIN.redispatch(_COMPOSITE, tensor, device)


def install() -> None:
    """Route torch.accelerator's entry points (those this torch has) and CPU pinning here."""
    names = tuple(n for n in _ANSWERS if hasattr(torch._C, n))
    patches.apply("torch_accelerator_hooks", {n: _routed(n) for n in names}, names)
    patches.apply("cpu_pin_memory", _pin_memory)
