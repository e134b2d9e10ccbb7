"""lx.optimization_barrier_."""
from __future__ import annotations

from jax import lax

from ..ir.node import OPT_BARRIER
from .registry import register


@register(OPT_BARRIER)
def _barrier(ctx, *values):
    return tuple(lax.optimization_barrier(tuple(values)))

