"""lazyxla.spmd and lazyxla.distributed, imported at call time: the SPMD mapping of
this layer (runtime.use_spmd, torch_xla.distributed.spmd) works once lazyxla has
them and says clearly that it does not until then."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional

from ..unsupported import refuse


def optional(module: str) -> Optional[ModuleType]:
    """`lazyxla.<module>`, or None when this lazyxla build does not have it."""
    try:
        return importlib.import_module(f"lazyxla.{module}")
    except ModuleNotFoundError as e:
        if e.name not in (f"lazyxla.{module}",):
            raise   # the module exists but something it imports is missing: say that
        return None


def required(module: str, what: str) -> ModuleType:
    found = optional(module)
    if found is None:
        refuse(what, f"It maps onto lazyxla.{module}, which this lazyxla build does not have")
    return found


def process_index() -> int:
    dist = optional("distributed")
    return 0 if dist is None else dist.process_index()


def process_count() -> int:
    dist = optional("distributed")
    return 1 if dist is None else dist.process_count()


def is_spmd() -> bool:
    spmd = optional("spmd")
    return False if spmd is None else bool(spmd.is_spmd())
