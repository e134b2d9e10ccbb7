"""torch's private surface that lazyxla builds on, and its differences across releases.

lazyxla runs on the Python backend route (docs/design.md): PrivateUse1 renamed from
Python, a wrapper subclass with `__torch_dispatch__`, and a dynamo backend whose
fake-tensor and AOTAutograd internals are told that a lazy tensor is a plain tensor.
None of that is public API, so every private name lazyxla uses is bound here and nowhere
else: a torch release that moves one breaks this module (at import, naming the name), and
its fix is made here, once. The private names lazyxla changes (rather than calls) are the
targets of lazyxla/patches, each with its own version guard and undo. Verified range:
torch 2.11 to 2.15 (`scripts/test_matrix.sh`, results in docs/compat-matrix.md); outside
it `check_version` warns once (it does not refuse).

Design: docs/design.md, "torch and JAX releases" and "frontend/torch_compat.py".
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable

import torch
from torch._decomp import decomposition_table  # noqa: F401  (re-exported: dispatch.py)
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from .._versions import TORCH_VERIFIED as VERIFIED
from .._versions import minor, warn_if_unverified


def torch_version() -> tuple[int, int]:
    """(major, minor) of the running torch, e.g. (2, 15) for "2.15.0+cu132"."""
    return minor(torch.__version__)


def check_version() -> bool:
    """Warn (True) when the running torch is outside the verified range."""
    return warn_if_unverified("torch", torch.__version__, VERIFIED,
                              "lazyxla uses private torch APIs (lazyxla/frontend/torch_compat.py) "
                              "that may have changed.")


# --- device registration (frontend/kernels.py) ----------------------------------------

class _DeviceGuard(torch._C._acc.DeviceGuard):
    """torch's Python device guard for PrivateUse1 (its `_DummyDeviceGuard`), with `type_`
    answered in C: C++ asks it on every device guard of a lazy tensor's op (about 2.3 times
    a traced op in W2's step, 1,369 calls), and a Python method costs a frame each time."""
    type_ = itertools.repeat(torch._C._autograd.DeviceType.PrivateUse1).__next__


def setup_python_backend(name: str, backend_module: object) -> None:
    """Rename PrivateUse1 to `name` with a Python device guard, allocator stubs and
    `backend_module` as `torch.<name>`."""
    _setup_privateuseone_for_python_backend(name, backend_module=backend_module, device_guard=_DeviceGuard())


make_wrapper_subclass: Callable = torch.Tensor._make_wrapper_subclass


# --- dispatch (frontend/dispatch.py) ---------------------------------------------------

def has_composite_implicit_kernel(op: torch._ops.OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


# --- autocast (frontend/autocast.py, frontend/autocast_lists.py) -------------------------

AUTOCAST_KEY = "AutocastPrivateUse1"
_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
# The shared op lists, as C++ macros, in the header the wheel ships.
AUTOCAST_HEADER = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"


def below_autocast():
    """Context manager: redispatch below our autocast key (what a C++ autocast kernel's
    `ExcludeDispatchKeyGuard` does)."""
    return torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS)

