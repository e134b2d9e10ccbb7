"""Reading lifted scalars out of their packed operands (ir/scalars.py packs them).

A packed operand is one float64 / int64 / bool / complex128 vector holding many
graph scalars. Each pack is converted to a node dtype once and split once, so a
scalar costs one reshape in the traced program. Reading each element on its own
(index, then convert) gave XLA 1,500 slice-and-convert chains inside W4's one
fusion: its compile took 1.4-1.6x as long, and the trace twice the primitives.
"""
from __future__ import annotations

from jax import lax

from ._util import cast


class PackReader:
    """Element `element` of pack operand `pack`, as a 0-d array of dtype `dtype`;
    one per traced program (it holds the tracers of that trace)."""
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict = {}

    def read(self, pack, key: int, element: int, dtype):
        parts = self._parts.get((key, dtype))
        if parts is None:
            n = pack.shape[0]
            parts = self._parts[(key, dtype)] = lax.split(cast(pack, dtype), (1,) * n)
        return lax.reshape(parts[element], ())
