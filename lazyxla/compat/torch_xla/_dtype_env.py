"""PyTorch/XLA's dtype switches `XLA_USE_BF16`, `XLA_DOWNCAST_BF16`, `XLA_USE_32BIT_LONG`,
mapped onto lazyxla's storage dtype policy (`lx.set_storage_dtypes`).

What they mean upstream (torch_xla/csrc/dtype.cpp): with `XLA_USE_BF16`, float32 and
float64 are held as bf16 on the device; with `XLA_DOWNCAST_BF16`, float32 as bf16 and
float64 as float32; with `XLA_USE_32BIT_LONG`, int64 as s32 and uint64 as u32. torch
still reports the logical dtype, and host reads give it back.

When upstream reads them: each variable once per process, the first time a tensor of a
type it governs is made (a static local), after which changes to the environment are
ignored; and `XLA_USE_BF16`, once on, decides float64 before `XLA_DOWNCAST_BF16` is looked
at. The policy installed here asks the same questions in the same order at lazyxla's
first transfer (or sync) of such a tensor, and the storage policy keeps each answer, so a
program that sets a variable after `import torch_xla` but before its first tensor gets
upstream's result. `LAZYXLA_STORAGE_DTYPES`, when set, wins over all three.
"""
from __future__ import annotations

import functools
import os
import re
import warnings

import torch

import lazyxla as lx
from lazyxla import config
from lazyxla.runtime import storage_dtypes


@functools.lru_cache(maxsize=None)
def _flag(name: str) -> bool:
    """`name` as upstream's GetEnvBool reads it: "true"/"false", else an integer (atoi)."""
    raw = os.environ.get(name)
    if raw is None:
        return False
    if raw in ("true", "false"):
        on = raw == "true"
    else:   # atoi: optional blanks and sign, then the leading digits; none is 0
        match = re.match(r"\s*[+-]?(\d+)", raw)
        on = bool(match) and int(match.group(1)) != 0
    if on:
        warnings.warn(f"{name} is deprecated by PyTorch/XLA since 2.6 (convert the model's dtype "
                      "instead); lazyxla honours it: see lx.set_storage_dtypes", stacklevel=2)
    return on


def upstream_storage(dtype: torch.dtype) -> torch.dtype:
    """The device dtype upstream holds a tensor of `dtype` in; where no variable says, the
    backend's default (the TPU holds 64-bit types in 32 bits)."""
    if dtype == torch.float64:
        if _flag("XLA_USE_BF16"):
            return torch.bfloat16
        return torch.float32 if _flag("XLA_DOWNCAST_BF16") else _backend_default(dtype)
    if dtype == torch.float32:
        return torch.bfloat16 if _flag("XLA_USE_BF16") or _flag("XLA_DOWNCAST_BF16") else dtype
    if dtype in (torch.int64, torch.uint64):
        return (torch.int32 if dtype == torch.int64 else torch.uint32) if _flag("XLA_USE_32BIT_LONG") \
            else _backend_default(dtype)
    return dtype


def _backend_default(dtype: torch.dtype) -> torch.dtype:
    default = storage_dtypes.backend_default()
    return dtype if default is None else default.storage(dtype)


_installed: list = [None]   # the policy install() made, for uninstall()


def install() -> None:
    """Make the upstream variables lazyxla's storage policy, unless LAZYXLA_STORAGE_DTYPES
    is set or a policy was already chosen (lx.set_storage_dtypes before `import torch_xla`)."""
    if not config.is_set("storage_dtypes") and storage_dtypes.chosen_by_user() is None:
        lx.set_storage_dtypes(upstream_storage)
        _installed[0] = lx.storage_dtypes()


def uninstall() -> None:
    """Remove the policy install() made, if it is still the current one (compat.uninstall)."""
    if _installed[0] is not None and lx.storage_dtypes() is _installed[0]:
        lx.set_storage_dtypes(None)
    _installed[0] = None
