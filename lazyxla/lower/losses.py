"""Loss functions and their backward ops: nll_loss (the cross-entropy path),
mse_loss, binary_cross_entropy (+ with logits). `reduction` is PyTorch's
enum: 0 none, 1 mean, 2 sum. The target class is picked with a one-hot
comparison rather than a gather, so the backward is a select, not a scatter.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ._util import opmath
from .registry import register

aten = torch.ops.aten

NONE, MEAN, SUM = 0, 1, 2


def _reduce(loss, reduction):
    if reduction == MEAN:
        return jnp.mean(loss)
    if reduction == SUM:
        return jnp.sum(loss)
    return loss


# -- nll_loss --------------------------------------------------------------------------

def _nll_parts(x, target, weight, ignore_index, acc):
    """(one-hot of the target class along the class dim, per-element weight). A uint8
    target (eager's nll_loss takes Byte) is compared as int32: class counts above 255
    and a negative ignore_index stay exact."""
    if target.dtype == jnp.uint8:
        target = target.astype(jnp.int32)
    cdim = 0 if x.ndim == 1 else 1
    nclass = x.shape[cdim]
    t = jnp.expand_dims(target, cdim)
    classes = jnp.arange(nclass, dtype=target.dtype).reshape((-1,) + (1,) * (x.ndim - cdim - 1))
    onehot = t == classes
    keep = target != ignore_index
    if weight is None:
        w = keep.astype(acc)
    else:
        w = jnp.where(keep, jnp.take(weight.astype(acc), jnp.clip(target, 0, nclass - 1)), jnp.zeros((), acc))
    return onehot, w, cdim


@register(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def _nll_loss_forward(ctx, x, target, weight, reduction, ignore_index):
    acc = opmath(x.dtype)
    onehot, w, cdim = _nll_parts(x, target, weight, ignore_index, acc)
    picked = jnp.sum(jnp.where(onehot, x.astype(acc), jnp.zeros((), acc)), axis=cdim)
    loss = -picked * w
    total = jnp.sum(w)
    if reduction == MEAN:
        return jnp.sum(loss) / total, total
    if reduction == SUM:
        return jnp.sum(loss), total
    return loss, jnp.zeros((), acc)


@register(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def _nll_loss_backward(ctx, grad, x, target, weight, reduction, ignore_index, total_weight):
    acc = opmath(x.dtype)
    onehot, w, cdim = _nll_parts(x, target, weight, ignore_index, acc)
    g = grad.astype(acc)
    if reduction == MEAN:
        coeff = -w * (g / total_weight.astype(acc))
    else:
        coeff = -w * g  # sum: 0-d grad; none: one grad per element
    return jnp.where(onehot, jnp.expand_dims(coeff, cdim), jnp.zeros((), acc))


# -- mse ---------------------------------------------------------------------------------

@register(aten.mse_loss.default)
def _mse_loss(ctx, x, target, reduction=MEAN):
    acc = opmath(ctx.jdtype)
    d = x.astype(acc) - target.astype(acc)
    return _reduce(d * d, reduction)


@register(aten.mse_loss_backward.default)
def _mse_loss_backward(ctx, grad, x, target, reduction):
    acc = opmath(ctx.jdtype)
    d = jnp.broadcast_to(x.astype(acc) - target.astype(acc), ctx.shape)
    g = 2 * d * grad.astype(acc)
    return g / d.size if reduction == MEAN else g


# -- binary cross-entropy ------------------------------------------------------------------

@register(aten.binary_cross_entropy.default)
def _bce(ctx, x, target, weight=None, reduction=MEAN):
    acc = opmath(ctx.jdtype)
    x, t = x.astype(acc), target.astype(acc)
    # PyTorch clamps each log term at -100 so that x = 0 or 1 gives a finite loss
    log_x = jnp.maximum(jnp.log(x), -100.0)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100.0)
    loss = -(t * log_x + (1 - t) * log_1mx)
    if weight is not None:
        loss = loss * weight.astype(acc)
    return _reduce(loss, reduction)


@register(aten.binary_cross_entropy_backward.default)
def _bce_backward(ctx, grad, x, target, weight=None, reduction=MEAN):
    acc = opmath(ctx.jdtype)
    x, t = x.astype(acc), target.astype(acc)
    g = grad.astype(acc) * (x - t) / jnp.maximum((1 - x) * x, 1e-12)
    if weight is not None:
        g = g * weight.astype(acc)
    g = jnp.broadcast_to(g, ctx.shape)
    return g / g.size if reduction == MEAN else g


@register(aten.binary_cross_entropy_with_logits.default)
def _bce_with_logits(ctx, x, target, weight=None, pos_weight=None, reduction=MEAN):
    acc = opmath(ctx.jdtype)
    x, t = x.astype(acc), target.astype(acc)
    # (1 - t) * x + lw * log(1 + exp(-x)), with log_sigmoid for stability
    lw = 1 + (pos_weight.astype(acc) - 1) * t if pos_weight is not None else 1
    loss = (1 - t) * x - lw * jax.nn.log_sigmoid(x)
    if weight is not None:
        loss = loss * weight.astype(acc)
    return _reduce(loss, reduction)
