"""Run PyTorch/XLA programs unchanged on lazyxla.

    python -m lazyxla.compat [--force] SCRIPT [ARGS...]

runs SCRIPT as `__main__` with lazyxla standing in for `torch_xla`;
`lazyxla.compat.install()` does the same in-process. The modules under
`lazyxla/compat/torch_xla/` map PyTorch/XLA's names onto lazyxla's public API
(`lazyxla`, `lx.metrics`, `lx.debug`, `lx.experimental`, the dynamo backend,
`lx.spmd`, `lx.distributed`) and implement nothing of their own; a name they
do not map raises `UnsupportedError` naming it. docs/compat.md lists every
mapped name and where lazyxla behaves differently from upstream.
"""
from __future__ import annotations

from .install import (TorchXlaInstalledError, UnsupportedModuleError, install, installed,  # noqa: F401
                      real_torch_xla, uninstall)
from .unsupported import UnsupportedError  # noqa: F401

__all__ = ["install", "uninstall", "installed", "real_torch_xla", "UnsupportedError",
           "UnsupportedModuleError", "TorchXlaInstalledError"]
