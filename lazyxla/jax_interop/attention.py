"""`scaled_dot_product_attention` on lazyxla tensors through `jax.nn.dot_product_attention`.

torch runs `F.scaled_dot_product_attention` as a composite above the
dispatcher's autograd key, so lazyxla only ever saw its math decomposition
(matmul, softmax, matmul). A kernel for lazyxla's autograd key takes the op as
a whole and records it with `lx.call_jax` (lower/attention.py), gradients
through `jax.vjp`. Calls it does not cover keep the math decomposition: an
attention mask (torch's safe softmax gives 0 where a row is fully masked, JAX
does not), dropout, float64 or mixed dtypes, inputs that are not 4-D or whose
batch sizes broadcast, key and value of different shapes, autocast (which the
composite's ops apply one by one), and tensors that are not lazy (fake tensors
while torch.compile traces).
"""
from __future__ import annotations

import functools

import torch

from ..frontend.device import DEVICE_TYPE
from ..frontend.tensor import LazyTensor
from ..lower.attention import sdpa
from ..runtime import backend
from .call import call_jax

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def through_jax(query, key, value, attn_mask, dropout_p: float, enable_gqa: bool) -> bool:
    """Whether a call takes the JAX route (module docstring)."""
    if attn_mask is not None or dropout_p != 0.0 or torch.is_autocast_enabled(DEVICE_TYPE):
        return False
    if not all(type(t) is LazyTensor for t in (query, key, value)):
        return False
    if query.dim() != 4 or key.shape != value.shape or key.dim() != 4:
        return False
    if query.dtype not in _DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        return False
    if query.shape[0] != key.shape[0] or query.shape[3] != key.shape[3]:
        return False
    heads, kv_heads = query.shape[1], key.shape[1]
    return heads == kv_heads or (enable_gqa and heads % kv_heads == 0)


def _kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if through_jax(query, key, value, attn_mask, dropout_p, enable_gqa):
        return call_jax(sdpa, query, key, value, is_causal=bool(is_causal),
                        scale=None if scale is None else float(scale),
                        implementation=backend.current().attention_implementation(query.dtype))
    return _SDPA.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


@functools.cache
def register() -> torch.library.Library:
    """Install the kernel for lazyxla's autograd key (once: the cache keeps the library,
    and with it the registration, alive)."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("scaled_dot_product_attention", _kernel, "AutogradPrivateUse1")
    return lib
