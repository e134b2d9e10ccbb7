"""Scaled dot-product attention as a JAX function, in torch's layout.

`jax.nn.dot_product_attention` in the implementation the backend chose when the call was
recorded (runtime/backend/: "cudnn" on GPUs for bfloat16 and float16, else "xla"); XLA's is
kept where cuDNN refuses the call while tracing (head size, GPU generation, cuDNN version).
jax_interop/attention.py routes `torch.nn.functional.scaled_dot_product_attention`
here through `lx.call_jax` when no mask, dropout or dtype needs torch's math
decomposition. (The cuDNN branch is not exercised by the CPU test suite.)
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp


def sdpa(query, key, value, *, is_causal: bool = False, scale: Optional[float] = None,
         implementation: str = "xla"):
    """Attention over (batch, heads, length, head_dim) arrays, as torch lays them out (JAX
    wants (batch, length, heads, head_dim)); key/value heads may divide query heads (GQA)."""
    q, k, v = (jnp.swapaxes(a, 1, 2) for a in (query, key, value))
    out = None
    if implementation == "cudnn":
        try:
            out = jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=is_causal, implementation="cudnn")
        except (ValueError, NotImplementedError, RuntimeError):
            out = None   # cuDNN refused this call: XLA's attention below
    if out is None:
        out = jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=is_causal, implementation="xla")
    return jnp.swapaxes(out, 1, 2)
