"""`lazyxla.compat.install()`: make `import torch_xla` load lazyxla's mapping.

A meta-path finder, first on `sys.meta_path`, answers every `torch_xla` module
name: a module the layer provides is the module of `lazyxla.compat.torch_xla`
with the same dotted tail, registered under both names (one object, so
`torch_xla.core.xla_model is lazyxla.compat.torch_xla.core.xla_model`); any
other `torch_xla.*` module raises `UnsupportedModuleError`, an ImportError that
names it. Its `find_distributions` gives `importlib.metadata` a `torch_xla`
distribution (distribution.py), so metadata lookups and imports agree while it is
installed. It also answers `torch._dynamo.backends.torchxla`, torch's own module of
the "openxla" backends, with dynamo_backends.py. Options weighed: filling `sys.modules` with every module up front
(imports the dynamo and SPMD mappings whether used or not, and gives no
message for a module that is missing) or copying the modules under the new
names (two objects per module, so state such as step closures would split).

A real torch_xla that is installed is never shadowed unless `force=True`:
install() raises `TorchXlaInstalledError` saying where it is.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
from typing import Optional

from .distribution import TorchXlaDistribution, matches as distribution_matches
from .modules import MODULES, PACKAGES
from .registrations import STOCK_BACKENDS
from .unsupported import ALIAS as _ALIAS, UnsupportedError


class UnsupportedModuleError(ModuleNotFoundError, UnsupportedError):
    """A torch_xla module the compatibility layer does not provide (an ImportError, so
    code that probes optional modules with `try: import ... except ImportError` goes on)."""


class TorchXlaInstalledError(RuntimeError):
    """A real torch_xla is installed (or imported) and install() was not forced."""


class _AliasLoader(importlib.abc.Loader):
    """Loads `torch_xla.X` as the already importable `lazyxla.compat.torch_xla.X`."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec = None

    def create_module(self, spec):
        # import_module runs the module's code once; importlib keeps the module's own
        # __name__ and __path__ but sets __spec__ to the alias spec: exec_module puts
        # the module's own back, so importlib.reload() and relative imports see one name.
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # Executed by create_module, under its lazyxla name.
        module.__spec__ = self.own_spec


class TorchXlaFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path=None, target=None):
        if fullname == STOCK_BACKENDS:
            return importlib.util.spec_from_loader(fullname, _AliasLoader("lazyxla.compat.dynamo_backends"))
        if fullname != "torch_xla" and not fullname.startswith("torch_xla."):
            return None
        if fullname not in MODULES:
            raise UnsupportedModuleError(
                f"{fullname} is not supported yet by lazyxla (lazyxla.compat provides "
                f"{', '.join(sorted(MODULES - PACKAGES))}; docs/compat.md lists the mapped names)",
                name=fullname)
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(_ALIAS + fullname[len("torch_xla"):]), is_package=fullname in PACKAGES)

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        """importlib.metadata's hook: the stand-in torch_xla distribution for a lookup of
        that name (or of all distributions)."""
        return iter([TorchXlaDistribution()] if distribution_matches(context.name) else [])


def _finder() -> Optional[TorchXlaFinder]:
    return next((f for f in sys.meta_path if isinstance(f, TorchXlaFinder)), None)


def real_torch_xla() -> Optional[str]:
    """Where an installed (or already imported) real torch_xla lives, else None."""
    module = sys.modules.get("torch_xla")
    if module is not None and not getattr(module, "__name__", "").startswith(_ALIAS):
        return getattr(module, "__file__", None) or "an already imported torch_xla"
    if _finder() is not None:
        return None
    spec = importlib.machinery.PathFinder.find_spec("torch_xla")
    return None if spec is None else (spec.origin or str(list(spec.submodule_search_locations or [])))


def install(force: bool = False) -> None:
    """Make `import torch_xla` (and its mapped submodules) load lazyxla's mapping.

    Refuses (TorchXlaInstalledError) when a real torch_xla is installed unless
    `force=True`, and always when a real one has been imported already. Idempotent."""
    if _finder() is not None:
        return
    real = real_torch_xla()
    if real is not None:
        if "torch_xla" in sys.modules:
            raise TorchXlaInstalledError(
                f"lazyxla.compat: the real torch_xla is imported already ({real}); install() must run "
                "before anything imports torch_xla")
        if not force:
            raise TorchXlaInstalledError(
                f"lazyxla.compat: a real torch_xla is installed ({real}); lazyxla does not shadow it. "
                "Pass --force (python -m lazyxla.compat --force SCRIPT) or install(force=True) to run "
                "on lazyxla instead, or run the script with plain python to use torch_xla.")
        print(f"lazyxla.compat: shadowing the installed torch_xla ({real}) with lazyxla (--force)",
              file=sys.stderr)
    from .registrations import register
    register()
    sys.meta_path.insert(0, TorchXlaFinder())
    names = sys.modules.get(_ALIAS + "._device_names")
    if names is not None:   # installed again: importing torch_xla will not run its code
        names.enable()
        sys.modules[_ALIAS + "._dtype_env"].install()
        sys.modules[_ALIAS + ".backends"].install()
        sys.modules[_ALIAS + "._patched_functions"].install()
        import lazyxla
        lazyxla.metrics.set_op_records(True)


def uninstall() -> None:
    """Undo install(): remove the finder and the `torch_xla` names it registered (the
    op and backend names stay registered with torch; they map onto lazyxla)."""
    finder = _finder()
    if finder is not None:
        sys.meta_path.remove(finder)
    names = sys.modules.get(_ALIAS + "._device_names")
    if names is not None:
        names.disable()   # "xla" device names stop meaning lazyxla's
        sys.modules[_ALIAS + "._dtype_env"].uninstall()   # and XLA_USE_BF16 & co. stop applying
        sys.modules[_ALIAS + ".backends"].uninstall()   # lazyxla's precision follows torch's again
        sys.modules[_ALIAS + "._patched_functions"].uninstall()   # torch's clip_grad_norm_ back
        import lazyxla
        lazyxla.metrics.set_op_records(False)
    for name in [n for n in sys.modules if n == "torch_xla" or n.startswith("torch_xla.")]:
        if getattr(sys.modules[name], "__name__", "").startswith(_ALIAS):
            del sys.modules[name]


def installed() -> bool:
    return _finder() is not None
