"""`torch.compile(..., backend="lazyxla")` and `torch.ops.lazyxla.set_buffer_donor_`.

backend.py   dynamo backend: AOTAutograd graphs turned into CompiledGraphs
plain.py     the fake-tensor converter and AOTAutograd see lazy tensors as plain tensors
replay.py    each ATen graph captured once per signature, one CALL node per call
donor.py     the donor op, inside and outside compiled code
optimizer.py compiled optimizer steps: step counters on the device, new state materialised
Design and the options weighed: docs/design.md, "Compiled functions".
Layering: like experimental/, this package sits on top of the public API
(donation.py) and the sync layer's capture; nothing below imports it.

Importing dynamo costs about 1.1 s, a third of `import lazyxla`, and most
programs never compile anything; so the backend is registered the moment
something imports `torch._dynamo` (torch.compile does, before it looks the
backend up), through a one-shot import hook, or at once if it is imported already.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import pkgutil
import sys

from .. import patches
from . import donor, optimizer, plain

_DYNAMO = "torch._dynamo"


def register() -> None:
    """Called once by `import lazyxla`."""
    donor.register()
    plain.treat_as_plain("fake_tensor_subclass_test")
    if _DYNAMO in sys.modules:
        _install()
    else:
        patches.apply("deferred_dynamo_disable")
        patches.apply("dynamo_import_hook", _AfterDynamoImport())


def _install() -> None:
    # Runs inside the import of torch._dynamo, which loaded its backend registry and
    # optimizer support already; AOTAutograd (backend.py) is imported at first use:
    # importing it here would re-enter a torch package that is still initialising.
    from torch._dynamo import trace_rules   # deferred: torch._dynamo is being imported (module docstring)
    from torch._dynamo.backends.registry import _BACKENDS, register_backend
    patches.undo("deferred_dynamo_disable")   # dynamo can hook frames now: torch's own wrappers
    if "lazyxla" not in _BACKENDS:
        register_backend(name="lazyxla")(_lazyxla_backend)
        # lazyxla's runtime (the tracer that eager code between graphs runs, syncs, JAX)
        # is not user code: dynamo must run it, never trace it. A call of it inside a
        # compiled function (lx.set_buffer_donation, a host read) becomes a graph break.
        modules, package_inits = _runtime_modules()
        _skip_modules(trace_rules, modules + ["jax", "jaxlib"], package_inits)
    plain.treat_as_plain("dynamo_plain_tensor_guards")
    optimizer.keep_steps_on_device()


def _skip_modules(trace_rules, names: list[str], files: list[str]) -> None:
    """trace_rules.add for each name, and each of `files` skipped as a file of its own,
    with dynamo's skip regex compiled once at the end instead of after every name: 140
    recompilations of a growing regex took 0.5-1.4 s of the first lazyxla op of every
    process (it imports torch._dynamo)."""
    recompile = trace_rules._recompile_re
    trace_rules._recompile_re = lambda: None
    try:
        for name in names:
            trace_rules.add(name)
        # `add` of a package skips its whole directory; the regex matches path prefixes,
        # so a package's __init__.py path alone skips only that file
        trace_rules.SKIP_DIRS.extend(files)
    finally:
        trace_rules._recompile_re = recompile
    recompile()


# Parts of lazyxla that are user code to dynamo: models and benchmark loops it may
# compile, and the optimizer step hooks (frontend/optim.py: a flag set around each
# step; traced, they keep a compiled step in one graph, skipped, they would break it).
_USER_CODE = {"lazyxla.workloads", "lazyxla.bench", "lazyxla.__main__", "lazyxla.frontend.optim"}
# Runtime packages skipped whole, by name: finding each of their modules' specs would
# import them (lazyxla.compat's torch_xla mapping is imported only when a script asks).
_RUNTIME_PACKAGES = {"lazyxla.compat"}


def _runtime_modules() -> tuple[list[str], list[str]]:
    """Every module of lazyxla's runtime, as leaf modules (a package name would skip its
    whole directory, user code included: dynamo matches file-name prefixes), and the
    __init__.py files of the packages they are in. Those hold runtime code too (the
    patches' wrappers): under compiled autograd, which runs them inside a compiled
    function's frame hook, dynamo compiled `is_traceable_wrapper_subclass`'s wrapper once
    per tensor until its recompile limit."""
    names, inits = [], []
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stack = [(root, "lazyxla")]
    while stack:
        path, prefix = stack.pop()
        inits.append(os.path.join(path, "__init__.py"))
        for m in pkgutil.iter_modules([path]):
            name = f"{prefix}.{m.name}"
            if name in _USER_CODE:
                continue
            if name in _RUNTIME_PACKAGES:
                names.append(name)
                continue
            if m.ispkg:
                stack.append((os.path.join(path, m.name), name))
            else:
                names.append(name)
    return names, inits


def _lazyxla_backend(gm, example_inputs, options=None):
    """torch.compile(..., backend="lazyxla", options=None) (backend.py)."""
    from .backend import lazyxla_backend   # deferred: it imports AOTAutograd (_install says why)
    return lazyxla_backend(gm, example_inputs, options)


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of `torch._dynamo` so that `_install`
    runs right after the module has executed, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != _DYNAMO:
            return None
        patches.undo("dynamo_import_hook")   # one shot: removes this finder
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module) -> None:
            original(module)
            _install()
        loader.exec_module = exec_module
        return spec
