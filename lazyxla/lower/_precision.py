"""The precision the matrix-product rules (lower/linalg.py) pass to XLA while a graph
is lowered: full float32 unless the graph was collected under another
`lx.set_matmul_precision` level (compile/precision.py sets it around the lowering).

Full float32 ("highest") is lazyxla's default because results are checked value by
value against eager PyTorch, which multiplies float32 in float32; "default" and
"high" trade that for speed where the backend has faster passes (bf16 on TPU, TF32 on
GPUs). Rules that use a product as an implementation detail (pooling, distances,
sampling) keep full precision whatever the level.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from jax import lax

LEVELS = {"default": lax.Precision.DEFAULT, "high": lax.Precision.HIGH, "highest": lax.Precision.HIGHEST}
_current = [lax.Precision.HIGHEST]


def dot_precision() -> lax.Precision:
    return _current[0]


@contextlib.contextmanager
def dot_precision_at(level: str) -> Iterator[None]:
    previous = _current[0]
    _current[0] = LEVELS[level]
    try:
        yield
    finally:
        _current[0] = previous
