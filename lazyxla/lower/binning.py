"""Binning: searchsorted and bucketize (histc, histogram and histogramdd are
decompositions over lazy tensors in frontend/histograms.py; `bincount` has an output
size that depends on the data (max + 1) and stays on the host)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from .registry import register

aten = torch.ops.aten


def search(seq, values, right: bool):
    """Per-row searchsorted: `seq` 1-d, or (*batch, n) with `values` (*batch, m)."""
    side = "right" if right else "left"
    if seq.ndim <= 1:
        return jnp.searchsorted(seq, values, side=side)
    batch = seq.shape[:-1]
    flat_seq = seq.reshape((-1, seq.shape[-1]))
    flat_val = values.reshape((flat_seq.shape[0], -1))
    out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(flat_seq, flat_val)
    return out.reshape(batch + values.shape[-1:])


@register(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(ctx, seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    return search(seq, jnp.asarray(values), right or side == "right")


@register(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(ctx, values, boundaries, *, out_int32=False, right=False):
    return search(boundaries, jnp.asarray(values), right)
