"""Ops that return a Python value computed from tensors (`torch.equal`, `allclose`):
computed on the device as lazy ops, then read on the host, a partial sync as any
`.item()` is. (A host fallback would copy both operands to the CPU instead.)"""
from __future__ import annotations

import torch

from ..ir.ops import registrar

aten = torch.ops.aten
register_decomposition = registrar("decomposition")


@register_decomposition(aten.equal.default)
def _equal(a, b) -> bool:
    if a.shape != b.shape:
        return False
    return bool(torch.eq(a, b).all().cpu())


@register_decomposition(aten.allclose.default)
def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan).all().cpu())
