"""SPMD: a sharding constraint inside the graph (lx.spmd.mark_sharding of pending IR)."""
from __future__ import annotations

from jax import lax

from ..ir.node import SHARDING_CONSTRAINT
from .registry import register


@register(SHARDING_CONSTRAINT)
def _constrain(ctx, value, sharding):
    return lax.with_sharding_constraint(value, sharding)

