"""Embedding ops beyond the plain lookup (which, with its backward, is in indexing.py):
max_norm renormalisation (`embedding_renorm`, the functional form of the in-place op
F.embedding calls) and the forward-only embedding bag.

embedding_renorm: eager walks the distinct looked-up rows and scales a row by
max_norm / (norm + 1e-7) when its norm exceeds max_norm. Here every row's norm is
computed and a looked-up mask (a scatter of the indices) picks the rows to scale:
same values, static shapes, no sort or unique.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch

from ._util import opmath
from .registry import register

aten = torch.ops.aten


@register(aten.embedding_renorm.default)
def _embedding_renorm(ctx, weight, indices, max_norm, norm_type):
    acc = opmath(weight.dtype)
    w = weight.astype(acc)
    # eager takes the norm as a tensor of the weight's dtype (rounded to bf16 there)
    norms = jnp.linalg.vector_norm(w, ord=norm_type, axis=1).astype(weight.dtype).astype(jnp.float64)
    looked_up = jnp.zeros(weight.shape[0], bool).at[indices.reshape(-1)].set(True, mode="drop")
    # the scale is a double, cast to the compute dtype by the multiplication
    scale = (max_norm / (norms + 1e-7)).astype(acc)
    return jnp.where((looked_up & (norms > max_norm))[:, None], w * scale[:, None], w)
