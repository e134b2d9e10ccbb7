"""Embedding ops beyond the plain lookup (which, with its backward, is in indexing.py):
max_norm renormalisation (`embedding_renorm`, the functional form of the in-place op
F.embedding calls) and the forward-only embedding bag (`_embedding_bag_forward_only`,
what F.embedding_bag runs without autograd).

Both give eager's values with static shapes (no sort or unique); the embedding bag's
auxiliary outputs have the shapes of PyTorch's meta function and, where eager's CPU
kernel defines them, its values. `_embedding_bag`, the autograd variant, stays on the
host with its backward.

Design: docs/design.md, "lower/embedding.py".
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ._util import opmath, position_dtype, stepwise_rounding
from .registry import register

aten = torch.ops.aten


@register(aten.embedding_renorm.default)
def _embedding_renorm(ctx, weight, indices, max_norm, norm_type):
    acc = opmath(weight.dtype)
    w = weight.astype(acc)
    # eager takes the norm as a tensor of the weight's dtype (rounded to bf16 there)
    norms = jnp.linalg.vector_norm(w, ord=norm_type, axis=1).astype(weight.dtype).astype(jnp.float64)
    looked_up = jnp.zeros(weight.shape[0], bool).at[indices.reshape(-1)].set(True, mode="drop")
    # the scale is a double that the in-place multiplication casts to the weight's own
    # dtype first (in bfloat16 too: a float32 scale left rows 1 bf16 ulp off)
    scale = (max_norm / (norms + 1e-7)).astype(weight.dtype).astype(acc)
    return jnp.where((looked_up & (norms > max_norm))[:, None], w * scale[:, None], w)


_MEAN, _MAX = 1, 2  # modes (0: sum)


@register(aten._embedding_bag_forward_only.default)
def _embedding_bag_forward_only(ctx, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                                per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    acc = opmath(weight.dtype)
    num_bags = ctx.shape[0][0]
    n = indices.shape[0]
    bag = jnp.cumsum(jnp.zeros(n + 1, position_dtype(n + 1)).at[offsets[:num_bags]].add(1))[:n] - 1
    kept = indices != padding_idx if padding_idx >= 0 else jnp.ones(n, bool)
    seg = jnp.where(kept, bag, num_bags)  # dropped indices go to an extra segment, cut off

    def per_bag(reduce, values):
        return reduce(values, seg, num_segments=num_bags + 1)[:num_bags]
    counts = per_bag(jax.ops.segment_sum, kept.astype(jnp.int64))
    rows = jnp.take(weight, indices, axis=0, mode="clip").astype(acc)
    max_idx = jnp.zeros(ctx.shape[3], jnp.int64)
    if mode == _MAX:
        out = jnp.where((counts > 0)[:, None], per_bag(jax.ops.segment_max, rows), jnp.zeros((), acc))
        # eager replaces on a strictly greater value: the first index reaching the max wins
        at_max = rows == jnp.take(out, jnp.minimum(seg, num_bags - 1), axis=0)
        first = per_bag(jax.ops.segment_min, jnp.where(at_max, jnp.arange(n)[:, None], n))
        max_idx = jnp.where(first < n, jnp.take(indices, jnp.minimum(first, n - 1)), 0)
    else:
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.astype(acc)[:, None]
        out = per_bag(jax.ops.segment_sum, rows)
        if mode == _MEAN:  # eager divides the sum already stored in the weight's dtype
            out = stepwise_rounding(weight.dtype)(out) / jnp.maximum(counts, 1).astype(acc)[:, None]
        else:  # eager zeroes bag_size in sum mode ("make bag_size output deterministic")
            counts = jnp.zeros_like(counts)
    sizes = jnp.zeros(ctx.shape[2], jnp.int64).at[:num_bags].set(counts)
    return out, bag.astype(ctx.jdtype[1]), sizes.astype(ctx.jdtype[2]), max_idx.astype(ctx.jdtype[3])
