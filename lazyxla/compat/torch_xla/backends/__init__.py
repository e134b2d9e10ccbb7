"""`torch_xla.backends`: the precision of float32 matrix products onto
`lx.set_matmul_precision` (compile/precision.py), which lowers every later graph
with JAX's `default_matmul_precision` at that level and keys compiled graphs on it."""
from __future__ import annotations

import lazyxla as lx

from ...unsupported import unsupported_names

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]


def set_mat_mul_precision(precision: str) -> None:
    """"default", "high" or "highest"; others raise ValueError, as upstream."""
    lx.set_matmul_precision(precision)


def get_mat_mul_precision() -> str:
    return lx.matmul_precision()


__getattr__ = unsupported_names(__name__)
