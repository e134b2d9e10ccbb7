"""The precision the matrix-product rules (lower/linalg.py) pass to XLA: the lowering
context's `precision` (compile/program.py `Ctx`), full float32 unless the graph was
collected under another `lx.set_matmul_precision` level (`Graph.matmul_precision`).

Full float32 ("highest") is lazyxla's default because results are checked value by
value against eager PyTorch, which multiplies float32 in float32; "default" and
"high" trade that for speed where the backend has faster passes (bf16 on TPU, TF32 on
GPUs). Rules that use a product as an implementation detail (pooling, distances,
sampling) keep full precision whatever the level.
"""
from __future__ import annotations

from jax import lax

from ..state import PRECISIONS

LEVELS = dict(zip(PRECISIONS, (lax.Precision.DEFAULT, lax.Precision.HIGH, lax.Precision.HIGHEST)))

