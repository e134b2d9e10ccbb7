"""The one error of the compatibility layer: a PyTorch/XLA name it does not map.

Every module of `lazyxla.compat.torch_xla` ends with
`__getattr__ = unsupported_names(__name__)`, so `xm.all_reduce` (or
`from torch_xla.core.xla_model import all_reduce`) raises `UnsupportedError`
naming `torch_xla.core.xla_model.all_reduce` at the user's line, instead of an
AttributeError from somewhere inside.

`UnsupportedError` is a `NotImplementedError`, not an `AttributeError`: Python
turns an AttributeError raised during `from m import name` into a bare
"cannot import name" ImportError and drops the message. The cost is that
`hasattr(xm, "all_reduce")` raises instead of answering False; dunder names
(which tools probe: `__wrapped__`, `__path__`) still raise AttributeError.
"""
from __future__ import annotations

from typing import Callable, NoReturn

from .modules import MODULES

ALIAS = "lazyxla.compat.torch_xla"   # the package that stands in for torch_xla


class UnsupportedError(NotImplementedError):
    """A torch_xla module or name that lazyxla's compatibility layer does not provide."""


def upstream_name(module_name: str) -> str:
    """`lazyxla.compat.torch_xla.core.xla_model` -> `torch_xla.core.xla_model`."""
    if module_name == ALIAS or module_name.startswith(ALIAS + "."):
        return "torch_xla" + module_name[len(ALIAS):]
    return module_name


def refuse(what: str, hint: str = "") -> NoReturn:
    raise UnsupportedError(
        f"{what} is not supported yet by lazyxla (lazyxla.compat maps PyTorch/XLA names onto "
        f"lazyxla's API; docs/compat.md lists the mapped names)" + (f". {hint}" if hint else ""))


def unsupported_names(module_name: str) -> Callable[[str], object]:
    """A module `__getattr__` that refuses every name the module does not define."""
    upstream = upstream_name(module_name)

    def __getattr__(name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {upstream!r} has no attribute {name!r}")
        if f"{upstream}.{name}" in MODULES:
            # `from torch_xla.amp import syncfree`: a provided submodule not imported yet.
            # Imported under its lazyxla name, which resolves before install() (a spawned
            # process imports this package first) and is the same module object after.
            import importlib
            return importlib.import_module(f"{module_name}.{name}")
        refuse(f"{upstream}.{name}")
    return __getattr__
