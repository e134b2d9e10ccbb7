"""lazyxla as torch's current accelerator: `torch.accelerator.*` and pinned host memory.

Once lazyxla renames PrivateUse1, torch takes it for the process's accelerator (a
registered PrivateUse1 backend comes first, CUDA included), so accelerate, Trainer and
DataLoader(pin_memory=True) ask it for what they ask CUDA. torch answers those
questions in C++, through hooks a Python backend cannot register: the device allocator
(`empty_cache`, `memory_stats`, `memory_allocated`, `get_memory_info`), the device
guard's `synchronizeDevice`, and the hooks' pinned-memory allocator. So lazyxla
answers them above C++:

* torch.accelerator's functions reach C++ through `torch._C._accelerator_*`; the patch
  "torch_accelerator_hooks" (lazyxla/patches) routes each of them here while lazyxla
  is the current accelerator, to the same function of `torch.lazyxla`
  (device_module.py), whose figures come from the runtime's ledger of live buffers.
* `Tensor.pin_memory()` ends in the `aten::_pin_memory` kernel of the CPU tensor,
  which would ask the PrivateUse1 hooks for a pinned allocator. lazyxla's CPU kernel
  copies the tensor instead: JAX uploads from ordinary host memory (it stages the copy
  itself), so a pageable copy is what "pinned for lazyxla" means, and the result is a
  new tensor as torch's is. A pin for another device type goes to torch's kernel.
  `torch.empty(..., pin_memory=True)` still fails with torch's message: its kernel is
  the CPU allocation path of every program, which lazyxla does not replace.
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
