"""Series evaluation as eager's Cephes ports do it (aten/src/ATen/native/Math.h), in
the argument's dtype and operation order, so float32 results round as eager's do;
and a division rounded as eager's is."""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp


def polevl(z, coefs: Sequence[float]):
    """sum coefs[i] z^(n-1-i) by Horner's rule from 0, as eager's loops (0 * inf is NaN there too)."""
    r = jnp.zeros_like(z)
    for c in coefs:
        r = r * z + c
    return r


def chbevl(y, coefs: Sequence[float]):
    """Clenshaw's sum of a Chebyshev series at y (Cephes' chbevl, with y already mapped)."""
    b0, b1, b2 = jnp.full_like(y, coefs[0]), jnp.zeros_like(y), jnp.zeros_like(y)
    for c in coefs[1:]:
        b2 = b1
        b1 = b0
        b0 = y * b1 - b2 + c
    return 0.5 * (b0 - b2)
