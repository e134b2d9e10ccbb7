"""The precision of float32 matrix products and convolutions in compiled graphs
(`lx.set_matmul_precision`; torch's `torch.set_float32_matmul_precision`; PyTorch/XLA's
`torch_xla.backends.set_mat_mul_precision`).

Levels, as JAX and PyTorch/XLA name them: "highest" (full float32: lazyxla's default,
so results match eager PyTorch), "high" (three bf16 passes on TPU, TF32-class on
GPUs, about 14 bits) and "default" (the backend's fastest: one bf16 pass on TPU).
XLA:CPU computes float32 products in float32 at every level, so on CPU the level
changes the program XLA is given, not the results.

Who decides: `lx.set_matmul_precision(level)` when it was given a level (compat's
`set_mat_mul_precision` is the same call); until then, or after
`lx.set_matmul_precision(None)`, torch's own switch, as CUDA follows it: "highest" ->
"highest", "high" (TF32 or three bf16 passes) -> "high", "medium" (one bf16 pass) ->
"default". An explicit lazyxla level wins because it is the more specific request: a
script may set torch's switch for CUDA and lazyxla's for the TPU. Under compat the
level starts at PyTorch/XLA's default, "default" (compat/torch_xla/backends/__init__.py), and
torch's switch is not followed, as upstream does not follow it.

How it applies: the level is the run-time state's `matmul_precision` mode
(lazyxla/state.py; FROM_TORCH until set). A graph is lowered at the level that was
current when it was collected (`Graph.matmul_precision`, set by sync/collect.py, which
also puts any level but the default into the graph key, so graphs compiled at one level
are never reused at another, and an unchanged level never compiles again). The
matrix-product rules get it from their lowering context (`ctx.precision`,
compile/program.py), and convolutions and the rest that leave the precision to JAX get
it as JAX's `default_matmul_precision` around the lowering. A captured function
(torch.compile, scan bodies) is a graph of its own: it computes at the level of its
capture, which its key holds. Read once per sync (one call into torch when following
it, about 0.2 us), never per op.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import jax
import torch

from ..state import FROM_TORCH, STATE

DEFAULT_LEVEL = "highest"
# torch.get_float32_matmul_precision() -> lazyxla's level (torch's docs: "high" is TF32 or
# bfloat16x3, "medium" is one bfloat16 pass)
TORCH_LEVELS = {"highest": "highest", "high": "high", "medium": "default"}


def set_matmul_precision(level: Optional[str]) -> Optional[str]:
    """Precision of float32 matrix products and convolutions in graphs collected from now
    on: "highest", "high" or "default"; None follows torch.set_float32_matmul_precision
    again (the initial state; module docstring). Returns the level set before, None when
    torch's switch was followed."""
    previous = STATE.set("matmul_precision", level)
    return None if previous is FROM_TORCH else previous


def matmul_precision() -> str:
    """The level graphs collected now compute at: lx.set_matmul_precision's, else torch's
    float32 matmul precision mapped onto lazyxla's levels ("highest" unless either is set)."""
    level = STATE.matmul_precision
    if level is FROM_TORCH:
        return TORCH_LEVELS[torch.get_float32_matmul_precision()]
    return level


@contextlib.contextmanager
def lowering(level: str) -> Iterator[None]:
    """Lower a graph collected at `level` (Graph.matmul_precision) with JAX's default
    precision at that level (the matrix-product rules read the lowering context; JAX's own
    functions a rule calls, such as `jax.nn.dot_product_attention`, read JAX's default, so
    it is set at every level, "highest" included)."""
    with jax.default_matmul_precision(level):
        yield
