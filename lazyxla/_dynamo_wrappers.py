"""torch's `_disable_dynamo` wrappers, found without importing torch._dynamo: what the
patch "deferred_dynamo_disable" (patches.py) changes. Finding them changes nothing.

A leaf: it imports torch, nothing from lazyxla.
"""
from __future__ import annotations

import sys

import torch
from torch._decomp import decomposition_table, meta_table

# modules whose functions and classes' methods may hold such wrappers
_DEFERRED_ROOTS = ("torch._refs", "torch._prims", "torch.optim")


def disable_dynamo_inners() -> list:
    """torch's `_disable_dynamo` wrappers reachable from the meta and decomposition tables
    and the modules of _DEFERRED_ROOTS (their functions and classes' methods), through the
    wrappers' `__wrapped__` links and the cells named `fn` in which they keep what they wrap."""
    inner_code = torch._compile._disable_dynamo(lambda: None).__code__
    stack, seen, found = [*meta_table.values(), *decomposition_table.values()], set(), []
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(_DEFERRED_ROOTS):
            for value in list(vars(module).values()):
                stack += list(vars(value).values()) if isinstance(value, type) else [value]
    while stack:
        fn = stack.pop()
        code = getattr(fn, "__code__", None)
        if code is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if code is inner_code:
            found.append(fn)
        stack.append(getattr(fn, "__wrapped__", None))
        stack.append(cells(fn).get("fn"))
    return found


def cells(fn) -> dict:
    """A closure's variables by name (an unassigned cell is left out)."""
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out
