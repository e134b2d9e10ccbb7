"""The precision of float32 matrix products and convolutions in compiled graphs
(`lx.set_matmul_precision`; PyTorch/XLA's `torch_xla.backends.set_mat_mul_precision`).

Levels, as JAX and PyTorch/XLA name them: "highest" (full float32: lazyxla's default,
so results match eager PyTorch), "high" (three bf16 passes on TPU, TF32-class on
GPUs, about 14 bits) and "default" (the backend's fastest: one bf16 pass on TPU).
XLA:CPU computes float32 products in float32 at every level, so on CPU the level
changes the program XLA is given, not the results.

How it applies: a graph is lowered at the level that was current when it was
collected (`Graph.matmul_precision`, set by sync/collect.py, which also puts any
level but the default into the graph key, so graphs compiled at one level are never
reused at another). Lowering sets it for the matrix-product rules
(lower/_precision.py) and, for convolutions and the rest that leave the precision to
JAX, as JAX's `default_matmul_precision`. A process-wide setting read once per sync,
never per op.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import jax

from ..lower._precision import LEVELS, dot_precision_at

DEFAULT_LEVEL = "highest"
_level = [DEFAULT_LEVEL]


def set_matmul_precision(level: str) -> None:
    """Precision of float32 matrix products and convolutions in graphs collected from now
    on: "highest" (the default), "high" or "default" (module docstring)."""
    if level not in LEVELS:
        raise ValueError(f"lazyxla: matmul precision {level!r} is not one of {', '.join(map(repr, LEVELS))}")
    _level[0] = level


def matmul_precision() -> str:
    """The current level of `set_matmul_precision` ("highest" unless set)."""
    return _level[0]


@contextlib.contextmanager
def lowering(level: str) -> Iterator[None]:
    """Lower a graph collected at `level` (Graph.matmul_precision) at that level."""
    if level == DEFAULT_LEVEL:
        yield
        return
    with dot_precision_at(level), jax.default_matmul_precision(level):
        yield
