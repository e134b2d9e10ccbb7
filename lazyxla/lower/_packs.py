"""Reading lifted scalars out of their packed operands (ir/scalars.py packs them).

A packed operand is one float64 / int64 / bool / complex128 vector holding many
graph scalars. Each pack is converted to a dtype once and split once, so a scalar
costs one reshape in the traced program. The dtype is the scalar node's own, or,
for a rule marked `casts_to_compute` (lower/_util.py), the rule's compute dtype.
Reading each element on its own (index, then convert) gave XLA 1,500
slice-and-convert chains inside W4's one fusion: its compile took about 1.5x as
long, and the trace twice the primitives.

A merged scalar (one operand that several equal scalars of a long chain share,
sync/collect.py) is read the same way with no element: converted once per dtype,
not once per op that reads it.
"""
from __future__ import annotations

from jax import lax

from ._util import cast


class PackReader:
    """Element `element` of the pack at operand position `operand` (None: the 0-d
    operand itself, a merged scalar), as a 0-d array of
    dtype `dtype`; one per traced program (it holds the tracers of that trace)."""
    __slots__ = ("_flat", "_parts")

    def __init__(self, flat: tuple) -> None:
        self._flat = flat
        self._parts: dict = {}

    def read(self, operand: int, element, dtype):
        if element is None:   # a merged 0-d scalar operand
            value = self._parts.get((operand, dtype))
            if value is None:
                value = self._parts[(operand, dtype)] = cast(self._flat[operand], dtype)
            return value
        value = self._parts.get((operand, element, dtype))
        if value is None:   # each element reshaped once, however many rules read it
            parts = self._parts.get((operand, dtype))
            if parts is None:
                pack = self._flat[operand]
                parts = self._parts[(operand, dtype)] = lax.split(cast(pack, dtype), (1,) * pack.shape[0])
            value = self._parts[(operand, element, dtype)] = lax.reshape(parts[element], ())
        return value
