"""A dict with a size bound, for the tracer's memo tables.

The meta cache (frontend/tracing.py) and the signature tables (ir/node.py) gain an entry
for every new op signature: shape, dtype and static arguments. A program whose shapes
keep changing (variable-length batches without padding, a growing sequence) would grow
them without end. Past the bound the oldest half is forgotten: a forgotten entry is
rebuilt when met again (a meta kernel run, a new signature id), so the cost is a
recompile of graphs that used it, never a wrong answer. Reads stay plain dict reads:
the per-op hot path pays nothing; only an insert checks the size.
"""
from __future__ import annotations

import itertools
from typing import Any


class BoundedTable(dict):
    """`put` inserts, forgetting the oldest (first inserted) half when `cap` is reached."""

    __slots__ = ("cap",)

    def __init__(self, cap: int) -> None:
        super().__init__()
        if cap < 2:
            raise ValueError(f"lazyxla: a BoundedTable needs a cap of at least 2, got {cap}")
        self.cap = cap

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= self.cap:
            for old in list(itertools.islice(iter(self), len(self) // 2)):
                del self[old]
        self[key] = value
        return value
