"""`torch_xla.distributed.spmd` (xs): the names of lazyxla.spmd (API.md "SPMD and
many processes"), looked up when used, so this module imports without it and each
name says clearly when this lazyxla build has no lazyxla.spmd yet.

Upstream's `mark_sharding` returns an `XLAShardedTensor` wrapper; lazyxla's returns
the tensor itself, now sharded."""
from __future__ import annotations

from ...unsupported import unsupported_names
from .. import _spmd

# Upstream names that are lazyxla.spmd's names.
MAPPED = ("Mesh", "get_1d_mesh", "set_global_mesh", "get_global_mesh", "mark_sharding",
          "clear_sharding")

_unsupported = unsupported_names(__name__)


def __getattr__(name: str) -> object:
    if name in MAPPED:
        return getattr(_spmd.required("spmd", f"torch_xla.distributed.spmd.{name}"), name)
    return _unsupported(name)
