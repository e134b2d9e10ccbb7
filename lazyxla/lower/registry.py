"""The table of lowering rules.

A rule is called as `rule(ctx, *args, **kwargs)` with the ATen call's
arguments, JAX arrays in place of tensors and of lifted scalars. `ctx`
describes the node's output: `ctx.shape`, `ctx.dtype` (torch) and
`ctx.jdtype` (JAX); tuples for multi-output ops. The interpreter casts a
single result to `ctx.jdtype`, so rules may compute in a wider type.
"""
from __future__ import annotations

from typing import Callable

LOWERINGS: dict = {}
# lazyxla's own decompositions (Python functions over lazy tensors), consulted
# before PyTorch's table: for ops whose schema hides a mutation
# (native_batch_norm updates running stats) or whose PyTorch decomposition
# reaches ops without a lowering (native_dropout -> rand_like).
DECOMPOSITIONS: dict = {}


def _registrar(table: dict) -> Callable:
    def register_in(*ops) -> Callable:
        def deco(fn: Callable) -> Callable:
            for op in ops:
                # two modules registering one op would make the winner depend on import order
                if op in table:
                    raise RuntimeError(f"lazyxla: {op} has two rules: {table[op].__module__}."
                                       f"{table[op].__name__} and {fn.__module__}.{fn.__name__}")
                table[op] = fn
            return fn
        return deco
    return register_in


register = _registrar(LOWERINGS)                    # @register(aten.op, ...): a lowering rule
register_decomposition = _registrar(DECOMPOSITIONS)  # @register_decomposition(aten.op, ...)


def load_all() -> None:
    """Import every rule module (each registers itself)."""
    import importlib
    import pkgutil
    from .. import lower
    for mod in pkgutil.iter_modules(lower.__path__):
        if mod.name != "registry":
            importlib.import_module(f"{lower.__name__}.{mod.name}")
