"""Registering lowering rules in the op records.

A rule is called as `rule(ctx, *args, **kwargs)` with the ATen call's
arguments, JAX arrays in place of tensors and of lifted scalars. `ctx`
describes the node's output: `ctx.shape`, `ctx.dtype` (torch) and
`ctx.jdtype` (JAX); tuples for multi-output ops. The interpreter casts a
single result to `ctx.jdtype`, so rules may compute in a wider type.

Every rule lands in the op's record (ir/ops.py), through its duplicate check;
LOWERINGS is a read-only view of those records. lazyxla's own decompositions run
torch ops on lazy tensors, so they live in the frontend (frontend/decompositions.py
and its neighbours) and register there.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from ..ir.ops import facts, registrar

LOWERINGS = facts("lowering")
register = registrar("lowering")   # @register(aten.op, ...): a lowering rule


def load_all() -> None:
    """Import every rule module of this package (each registers itself)."""
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if mod.name != "registry":
            importlib.import_module(f"{__package__}.{mod.name}")
