"""Per-OpOverload facts computed once from the schema (never on the hot path).

`scalar_slots[i]` says whether argument i has schema type Scalar / Scalar[] /
Scalar?: those values are lifted out of the graph as runtime operands, so a
changing learning rate never changes the graph key. A few Scalars that change
the numerics of the lowering (pow's exponent) stay compile-time constants.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..ir.ops import facts, register_fact

aten = torch.ops.aten

# Scalars that select a different algorithm and therefore stay static.
for _op, _names in ((aten.pow.Tensor_Scalar, ("exponent",)), (aten.pow_.Scalar, ("exponent",)),
                    (aten.linalg_vector_norm.default, ("ord",)),
                    # output shapes depend on these values
                    (aten.arange.start_step, ("start", "end", "step")), (aten.arange.start, ("start", "end")),
                    (aten.arange.default, ("end",))):
    register_fact(_op, "static_scalars", _names)
del _op, _names
_STATIC_SCALARS = facts("static_scalars")


def _is_scalar_type(t) -> bool:
    # Python numbers passed where the schema says Tensor are PyTorch's "wrapped
    # numbers" (x + 1.5 is add.Tensor(x, 1.5)): lifted like Scalars.
    s = str(t)
    return s in ("Scalar", "Scalar?", "Scalar[]", "number", "number?", "Tensor", "Tensor?")


class OpInfo:
    """What lazyxla knows of one OpOverload. It also heads the op's shape-inference keys
    (frontend/tracing.py), which are its nodes' signatures: one OpInfo per OpOverload
    (dispatch.classify), hashed by identity in C where the OpOverload's `__hash__` is a
    Python call on every lookup; printed as its op (explanations of cache misses)."""
    __slots__ = ("func", "name", "arg_names", "scalar_slots", "scalar_kw", "kind",
                 "functional", "handler", "offset_free")

    def __init__(self, func) -> None:
        schema = func._schema
        self.func = func
        self.name = f"{schema.name.split('::')[-1]}"
        self.arg_names = tuple(a.name for a in schema.arguments)
        static = _STATIC_SCALARS.get(func, ())
        slots = []
        for a in schema.arguments:
            slots.append(_is_scalar_type(a.type) and a.name not in static)
        self.scalar_slots = tuple(slots)
        self.scalar_kw = frozenset(a.name for a, s in zip(schema.arguments, slots) if s)
        # No output aliases an operand: the outputs are fresh tensors, whose layout never
        # depends on where an operand starts in its storage, so the shape-inference key
        # (and the node's signature, which is in every graph key) leaves offsets out.
        # `x[:, i]` read by a matmul then keys the matmul alike for every i.
        self.offset_free = all(r.alias_info is None for r in schema.returns)
        self.kind = "functional"
        self.functional: Optional[object] = None
        self.handler = None

    def __str__(self) -> str:
        return str(self.func)

    __repr__ = __str__


def is_inplace(func) -> bool:
    schema = func._schema
    args = schema.arguments
    return (schema.name.endswith("_") and bool(args) and args[0].alias_info is not None
            and args[0].alias_info.is_write)


def is_out(func) -> bool:
    return any(a.name == "out" or (a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
               for a in func._schema.arguments)


def _argument_types(schema) -> list[str]:
    return [str(a.type) for a in schema.arguments]


def functional_variant(func):
    """The functional overload of an in-place or out= op, or None."""
    schema = func._schema
    base = schema.name.split("::")[-1]
    if is_inplace(func):
        packet = getattr(aten, base[:-1], None)
        if packet is None:
            return None
        # the overload of the same name, unless its arguments differ: pow_.Scalar (Tensor self,
        # Scalar exponent) is pow.Tensor_Scalar, not pow.Scalar (Scalar self, Tensor exponent)
        wanted = _argument_types(schema)
        same = getattr(packet, func._overloadname, None)
        if same is not None and _argument_types(same._schema) == wanted:
            return same
        for name in packet.overloads():
            cand = getattr(packet, name)
            if not cand._schema.is_mutable and _argument_types(cand._schema) == wanted:
                return cand
        return None
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    wanted = [a.name for a in schema.arguments if not (a.alias_info is not None and a.alias_info.is_write)]
    for name in packet.overloads():
        cand = getattr(packet, name)
        cs = cand._schema
        if cs.is_mutable:
            continue
        if [a.name for a in cs.arguments] == wanted:
            return cand
    return None
