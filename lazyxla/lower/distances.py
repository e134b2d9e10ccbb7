"""p-norm distances: cdist (`_cdist_forward`), pdist (`_pdist_forward`) and their
backward ops, with eager CPU's formulas (aten/src/ATen/native/Distance.cpp and
cpu/DistanceOpsKernel.cpp).

The norms are taken of |a - b| per pair: p = 0 counts min(ceil(|d|), 1), p = 1 sums,
p = 2 is sqrt of the sum of squares, p = inf the max, any other p is
(sum |d|^p)^(1/p). For p = 2, cdist switches (like eager) to the matmul expansion
|a|^2 - 2 a.b + |b|^2, clamped at 0, when compute_mode asks for it (1) or by default
(0) when either side has more than 25 rows: its rounding differs from the direct sum
by far more than the tolerance for nearly equal rows, so the switch is reproduced,
not improved on. Gradients are eager's closed forms, which set 0 where the distance
is 0 (autodiff of the norm would give NaN there).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._util import opmath
from .registry import register

aten = torch.ops.aten
_HIGHEST = lax.Precision.HIGHEST


def _pnorm(diff, p: float, skip_nan_max: bool = False):
    """Eager's p-norm of the differences along the last axis. `skip_nan_max`: cdist's
    scalar loop takes the inf-norm with std::max(agg, |d|) from 0, which never picks a
    NaN (pdist's vectorised max does propagate it)."""
    axis = -1
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum(jnp.minimum(jnp.ceil(a), 1), axis=axis)
    if p == 1:
        return jnp.sum(a, axis=axis)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axis))
    if math.isinf(p):
        return jnp.max(jnp.where(jnp.isnan(a), 0, a) if skip_nan_max else a, axis=axis)
    return jnp.sum(a ** p, axis=axis) ** (1.0 / p)


def _pnorm_grad(diff, grad, dist, p: float):
    """d dist / d a times grad, per element of diff = a - b (eager's `backward` of
    each norm; grad and dist broadcast against diff)."""
    zero = jnp.zeros((), diff.dtype)
    if p == 0:
        return jnp.zeros_like(diff)
    if p == 1:
        return grad * jnp.sign(diff)
    if math.isinf(p):
        return grad * jnp.sign(diff) * (jnp.abs(diff) == dist)
    safe = jnp.where(dist == 0, jnp.ones((), dist.dtype), dist)
    if p == 2:
        out = grad * diff / safe
    elif p < 2:
        out = jnp.sign(diff) * jnp.abs(diff) ** (p - 1) * grad / safe ** (p - 1)
        if p < 1:  # 0 ** (p - 1) is inf: eager zeroes those terms
            out = jnp.where(diff == 0, zero, out)
    else:
        out = diff * jnp.abs(diff) ** (p - 2) * grad / safe ** (p - 1)
    return jnp.where(dist == 0, zero, out)


def _batch_broadcast(x1, x2, batch):
    return (jnp.broadcast_to(x1, batch + x1.shape[-2:]), jnp.broadcast_to(x2, batch + x2.shape[-2:]))


def _uses_mm(p: float, mode, r1: int, r2: int) -> bool:
    mode = 0 if mode is None else mode
    return p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))


def _euclidean_mm(x1, x2):
    """Eager's `_euclidean_dist`: [-2a, |a|^2, 1] . [b, 1, |b|^2], clamped at 0, sqrt."""
    n1 = jnp.sum(x1 * x1, axis=-1, keepdims=True)
    n2 = jnp.sum(x2 * x2, axis=-1, keepdims=True)
    a = jnp.concatenate([-2 * x1, n1, jnp.ones_like(n1)], axis=-1)
    b = jnp.concatenate([x2, jnp.ones_like(n2), n2], axis=-1)
    return jnp.sqrt(jnp.maximum(jnp.matmul(a, jnp.swapaxes(b, -1, -2), precision=_HIGHEST), 0))


@register(aten._cdist_forward.default)
def _cdist_forward(ctx, x1, x2, p, compute_mode=None):
    acc = opmath(ctx.jdtype)
    r1, r2 = ctx.shape[-2:]
    if 0 in ctx.shape or x1.shape[-1] == 0:
        return jnp.zeros(ctx.shape, acc)
    x1, x2 = _batch_broadcast(x1.astype(acc), x2.astype(acc), tuple(ctx.shape[:-2]))
    if _uses_mm(p, compute_mode, r1, r2):
        return _euclidean_mm(x1, x2)
    return _pnorm(x1[..., :, None, :] - x2[..., None, :, :], p, skip_nan_max=True)


@register(aten._cdist_backward.default)
def _cdist_backward(ctx, grad, x1, x2, p, dist):
    """Gradient for x1 (autograd calls it again with the roles swapped for x2), over the
    broadcast batch: the engine sums it back to x1's own shape."""
    acc = opmath(ctx.jdtype)
    if 0 in ctx.shape or 0 in x2.shape:
        return jnp.zeros(ctx.shape, acc)
    x1, x2 = _batch_broadcast(x1.astype(acc), x2.astype(acc), tuple(ctx.shape[:-2]))
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    g = _pnorm_grad(diff, grad.astype(acc)[..., None], dist.astype(acc)[..., None], p)
    return jnp.sum(g, axis=-2)


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs (i < j) in eager's output order (row-major upper triangle)."""
    return np.triu_indices(n, 1)


@register(aten._pdist_forward.default)
def _pdist_forward(ctx, x, p=2):
    acc = opmath(ctx.jdtype)
    if ctx.shape[0] == 0 or x.shape[1] == 0:
        return jnp.zeros(ctx.shape, acc)
    i, j = _pairs(x.shape[0])
    x = x.astype(acc)
    return _pnorm(x[i] - x[j], p)


@register(aten._pdist_backward.default)
def _pdist_backward(ctx, grad, x, p, dist):
    acc = opmath(ctx.jdtype)
    if dist.shape[0] == 0 or x.shape[1] == 0:
        return jnp.zeros(ctx.shape, acc)
    i, j = _pairs(x.shape[0])
    x = x.astype(acc)
    g = _pnorm_grad(x[i] - x[j], grad.astype(acc)[:, None], dist.astype(acc)[:, None], p)
    return jnp.zeros(x.shape, acc).at[i].add(g).at[j].add(-g)
