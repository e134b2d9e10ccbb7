"""Registering lowering rules (and lazyxla's own decompositions) in the op records.

A rule is called as `rule(ctx, *args, **kwargs)` with the ATen call's
arguments, JAX arrays in place of tensors and of lifted scalars. `ctx`
describes the node's output: `ctx.shape`, `ctx.dtype` (torch) and
`ctx.jdtype` (JAX); tuples for multi-output ops. The interpreter casts a
single result to `ctx.jdtype`, so rules may compute in a wider type.

Every fact lands in the op's record (ir/ops.py), through its duplicate check;
LOWERINGS and DECOMPOSITIONS are read-only views of those records.
"""
from __future__ import annotations

from ..ir.ops import facts, registrar

LOWERINGS = facts("lowering")
# lazyxla's own decompositions (Python functions over lazy tensors), consulted
# before PyTorch's table: for ops whose schema hides a mutation
# (native_batch_norm updates running stats) or whose PyTorch decomposition
# reaches ops without a lowering (native_dropout -> rand_like).
DECOMPOSITIONS = facts("decomposition")

register = registrar("lowering")                    # @register(aten.op, ...): a lowering rule
register_decomposition = registrar("decomposition")  # @register_decomposition(aten.op, ...)


def load_all() -> None:
    """Import every rule module (each registers itself)."""
    import importlib
    import pkgutil
    from .. import lower
    for mod in pkgutil.iter_modules(lower.__path__):
        if mod.name != "registry":
            importlib.import_module(f"{lower.__name__}.{mod.name}")
