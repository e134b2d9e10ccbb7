"""The `deferred_dynamo_disable` patch: torch's `_disable_dynamo` wrappers run their
function directly until torch._dynamo is imported (the patch's reason in PATCHES)."""
from __future__ import annotations

import sys
from typing import Callable

import torch
from torch._decomp import decomposition_table, meta_table

_DYNAMO = "torch._dynamo"
_DISABLE_ATTR = "__dynamo_disable"   # where torch._compile._disable_dynamo caches its wrapper
_DEFERRED_ROOTS = ("torch._refs", "torch._prims", "torch.optim")


def _disable_dynamo_inners() -> list:
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
        stack.append(_cells(fn).get("fn"))
    return found


def _cells(fn) -> dict:
    """A closure's variables by name (an unassigned cell is left out)."""
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


def _run_directly(fn: Callable, recursive: bool) -> Callable:
    """What `torch._disable_dynamo` runs for `fn` while torch._dynamo is not imported: `fn`
    itself, since no frame-evaluation hook can be set yet. Once dynamo is imported, torch's
    own disabled function (what the wrapper would have built at its first call)."""
    def call(*args, **kwargs):
        if _DYNAMO not in sys.modules:
            return fn(*args, **kwargs)
        import torch._dynamo   # deferred: loaded already here (tested above); importing it costs 0.45 s
        disabled = torch._dynamo.disable(fn, recursive, wrapping=False)
        setattr(fn, _DISABLE_ATTR, disabled)
        return disabled(*args, **kwargs)
    call.lazyxla_deferred = True   # type: ignore[attr-defined]
    return call


def apply() -> list:
    if _DYNAMO in sys.modules:
        return []
    wrapped = []
    for inner in _disable_dynamo_inners():
        cells = _cells(inner)
        fn = cells.get("fn")
        if hasattr(fn, "__dict__") and "recursive" in cells and _DISABLE_ATTR not in vars(fn):
            setattr(fn, _DISABLE_ATTR, _run_directly(fn, cells["recursive"]))
            wrapped.append(fn)
    return wrapped


def undo(wrapped: list) -> None:
    for fn in wrapped:
        if getattr(vars(fn).get(_DISABLE_ATTR), "lazyxla_deferred", False):
            delattr(fn, _DISABLE_ATTR)
