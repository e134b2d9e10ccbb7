"""The precision of float32 matrix products and convolutions in compiled graphs
(`lx.set_matmul_precision`; PyTorch/XLA's `torch_xla.backends.set_mat_mul_precision`).

Levels, as JAX and PyTorch/XLA name them: "highest" (full float32: lazyxla's default,
so results match eager PyTorch), "high" (three bf16 passes on TPU, TF32-class on
GPUs, about 14 bits) and "default" (the backend's fastest: one bf16 pass on TPU).
XLA:CPU computes float32 products in float32 at every level, so on CPU the level
changes the program XLA is given, not the results.

How it applies: the level is the run-time state's `matmul_precision` mode
(lazyxla/state.py). A graph is lowered at the level that was current when it was
collected (`Graph.matmul_precision`, set by sync/collect.py, which also puts any level
but the default into the graph key, so graphs compiled at one level are never reused at
another). The matrix-product rules get it from their lowering context (`ctx.precision`,
compile/program.py), and convolutions and the rest that leave the precision to JAX get
it as JAX's `default_matmul_precision` around the lowering. A captured function
(torch.compile, scan bodies) is a graph of its own: it computes at the level of its
capture, which its key holds. Read once per sync, never per op.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import jax

from ..state import STATE

DEFAULT_LEVEL = "highest"


def set_matmul_precision(level: str) -> None:
    """Precision of float32 matrix products and convolutions in graphs collected from now
    on: "highest" (the default), "high" or "default" (module docstring)."""
    STATE.set("matmul_precision", level)


def matmul_precision() -> str:
    """The current level of `set_matmul_precision` ("highest" unless set)."""
    return STATE.matmul_precision


@contextlib.contextmanager
def lowering(level: str) -> Iterator[None]:
    """Lower a graph collected at `level` (Graph.matmul_precision) with JAX's default
    precision at that level (the matrix-product rules read the lowering context)."""
    if level == DEFAULT_LEVEL:
        yield
        return
    with jax.default_matmul_precision(level):
        yield
