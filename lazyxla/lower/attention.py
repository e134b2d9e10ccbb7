"""Scaled dot-product attention as a JAX function, in torch's layout.

`jax.nn.dot_product_attention` picks cuDNN's flash attention on GPUs where it
applies and XLA's fused softmax elsewhere. jax_interop/attention.py routes
`torch.nn.functional.scaled_dot_product_attention` here through `lx.call_jax`
when no mask, dropout or dtype needs torch's math decomposition.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp


def sdpa(query, key, value, *, is_causal: bool = False, scale: Optional[float] = None):
    """Attention over (batch, heads, length, head_dim) arrays, as torch lays them out (JAX
    wants (batch, length, heads, head_dim)); key/value heads may divide query heads (GQA)."""
    out = jax.nn.dot_product_attention(jnp.swapaxes(query, 1, 2), jnp.swapaxes(key, 1, 2),
                                       jnp.swapaxes(value, 1, 2), scale=scale, is_causal=is_causal)
    return jnp.swapaxes(out, 1, 2)
