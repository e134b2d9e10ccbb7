"""`torch_xla.backends`: the precision of float32 matrix products onto
`lx.set_matmul_precision` (compile/precision.py), which lowers every later graph
with JAX's `default_matmul_precision` at that level and keys compiled graphs on it.

Upstream's level before any call is "default" on every platform (PyTorch/XLA 2.9,
torch_xla/csrc/helpers.cpp: `s_mat_mul_precision = xla::PrecisionConfig::DEFAULT`): one
bf16 pass per float32 product on a TPU. Under compat lazyxla starts there too, unless
lazyxla's own level was set before `import torch_xla`, and, as upstream, does not follow
`torch.set_float32_matmul_precision` (lazyxla natively does)."""
from __future__ import annotations

import lazyxla as lx

from ...unsupported import unsupported_names

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]

UPSTREAM_DEFAULT = "default"
_installed = [False]   # install() set upstream's default (for uninstall())


def set_mat_mul_precision(precision: str) -> None:
    """"default", "high" or "highest"; others raise ValueError, as upstream."""
    lx.set_matmul_precision(precision)


def get_mat_mul_precision() -> str:
    return lx.matmul_precision()


def install() -> None:
    """Upstream's level before any call, unless lazyxla's own level was set already."""
    if _installed[0]:   # again (a reload of torch_xla): the level is install()'s or a later call's
        return
    previous = lx.set_matmul_precision(UPSTREAM_DEFAULT)
    if previous is not None:   # chosen by the user before torch_xla's import: it stays
        lx.set_matmul_precision(previous)
    _installed[0] = previous is None


def uninstall() -> None:
    """Back to following torch's switch, if the level is still the one install() set."""
    if _installed[0] and lx.matmul_precision() == UPSTREAM_DEFAULT:
        lx.set_matmul_precision(None)
    _installed[0] = False


__getattr__ = unsupported_names(__name__)
