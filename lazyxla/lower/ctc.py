"""CTC loss: `_ctc_loss` (negative log-likelihood and log-alpha) and its backward.

Eager's CPU kernel (aten/src/ATen/native/LossCTC.cpp), step for step: the targets
extended with blanks (s even: blank, s odd: target (s-1)/2), the alpha recursion in
log space over time (a `lax.scan`), each step a log-sum-exp of up to three
predecessors around their maximum (0 when all are -inf), the skip from s-2 only between
different labels; the loss from the last two states at each sequence's own input
length. The backward runs the beta recursion down from each sequence's last frame and
gives exp(log_probs) - exp(log-sum-exp over s of alpha + beta + nll - log_probs) per
class, zero past the input length (and for an infinite loss under zero_infinity).
Lengths differ per sequence, so they are runtime masks, not shapes: the log-alpha
output keeps eager's static (batch, time, 2 * max target length + 1) shape.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
from jax import lax

from .registry import register

aten = torch.ops.aten

NEG_INF = -jnp.inf


def _logsumexp3(a, b, c):
    m = jnp.maximum(jnp.maximum(a, b), c)
    m = jnp.where(m == NEG_INF, 0.0, m)
    return jnp.log(jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)) + m


def _shift(x, k: int, fill=NEG_INF):
    """x[s - k] (k > 0) or x[s + |k|] (k < 0) along the last axis, `fill` outside."""
    pad = jnp.full(x.shape[:-1] + (abs(k),), fill, x.dtype)
    return jnp.concatenate([pad, x[..., :-k]], -1) if k > 0 else jnp.concatenate([x[..., -k:], pad], -1)


def _extended(log_probs, targets, target_lengths, states: int, blank: int):
    """Per sequence: the extended labels (N, S'), their log-probs (N, T, S'), whether a
    state exists (s < 2L + 1), and whether the skip from s - 2 is allowed."""
    n = log_probs.shape[1]
    width = (states - 1) // 2
    j = jnp.arange(max(width, 1))
    if targets.ndim == 2:
        labels = targets[:, :width] if width else jnp.zeros((n, 0), targets.dtype)
    else:  # concatenated targets: each sequence's labels start after the previous ones'
        start = jnp.cumsum(target_lengths) - target_lengths
        idx = jnp.clip(start[:, None] + j[None, :width], 0, max(targets.shape[0] - 1, 0))
        labels = targets[idx] if targets.shape[0] else jnp.zeros((n, width), targets.dtype)
    s = jnp.arange(states)
    if width:
        at = jnp.broadcast_to(jnp.clip((s - 1) // 2, 0, width - 1), (n, states))
        ext = jnp.where(s % 2 == 0, blank, jnp.take_along_axis(labels, at, axis=1))
    else:
        ext = jnp.full((n, states), blank)
    ext = jnp.broadcast_to(ext, (n, states)).astype(jnp.int64)
    lp_ext = jnp.take_along_axis(jnp.moveaxis(log_probs, 1, 0), ext[:, None, :], axis=2)  # (N, T, S')
    exists = s[None] < 2 * target_lengths[:, None] + 1
    skip = (s[None] > 1) & (ext != _shift(ext, 2, -1))
    return ext, lp_ext, exists, skip


def _alpha(lp_ext, exists, skip, target_lengths):
    """log-alpha (N, T, S'); rows past a sequence's input length are not used."""
    s = jnp.arange(lp_ext.shape[-1])
    first = jnp.where((s == 0) | ((s == 1) & (target_lengths[:, None] > 0)), lp_ext[:, 0], NEG_INF)
    first = jnp.where(exists, first, NEG_INF)

    def step(prev, lp_t):
        new = _logsumexp3(prev, _shift(prev, 1), jnp.where(skip, _shift(prev, 2), NEG_INF)) + lp_t
        new = jnp.where(exists, new, NEG_INF)
        return new, new

    _, rest = lax.scan(step, first, jnp.moveaxis(lp_ext[:, 1:], 1, 0))
    return jnp.concatenate([first[:, None], jnp.moveaxis(rest, 0, 1)], axis=1)


def _lengths(x):
    return jnp.asarray(x, jnp.int64).reshape(-1)


@register(aten._ctc_loss.default)
def _ctc_loss(ctx, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    t_in, t_len = _lengths(input_lengths), _lengths(target_lengths)
    states = ctx.shape[1][2]
    _, lp_ext, exists, skip = _extended(log_probs, targets, t_len, states, blank)
    log_alpha = _alpha(lp_ext, exists, skip, t_len)
    last = jnp.take_along_axis(log_alpha, jnp.clip(t_in - 1, 0)[:, None, None], axis=1)[:, 0]  # (N, S')
    l1 = jnp.take_along_axis(last, (2 * t_len)[:, None], axis=1)[:, 0]
    l2 = jnp.where(t_len > 0, jnp.take_along_axis(last, jnp.clip(2 * t_len - 1, 0)[:, None], axis=1)[:, 0], NEG_INF)
    m = jnp.maximum(l1, l2)
    m = jnp.where(m == NEG_INF, 0.0, m)
    nll = -(jnp.log(jnp.exp(l1 - m) + jnp.exp(l2 - m)) + m)
    nll = jnp.where(t_in == 0, jnp.where(t_len == 0, 0.0, jnp.inf), nll)
    return nll.astype(log_probs.dtype), log_alpha.astype(log_probs.dtype)


@register(aten._ctc_loss_backward.default)
def _ctc_loss_backward(ctx, grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
                       zero_infinity=False):
    t_in, t_len = _lengths(input_lengths), _lengths(target_lengths)
    steps, n, classes = log_probs.shape
    states = log_alpha.shape[2]
    ext, lp_ext, exists, skip = _extended(log_probs, targets, t_len, states, blank)
    s = jnp.arange(states)
    skip_next = _shift(skip, -2, False)  # beta's skip from s + 2: allowed where alpha's from s + 2 is
    init_state = (s[None] == 2 * t_len[:, None]) | ((s[None] == 2 * t_len[:, None] - 1) & (t_len[:, None] > 0))

    def step(nxt, xs):
        t, lp_t = xs
        rec = _logsumexp3(nxt, _shift(nxt, -1), jnp.where(skip_next, _shift(nxt, -2), NEG_INF)) + lp_t
        init = jnp.where(init_state, lp_t, NEG_INF)
        row = jnp.where((t == t_in - 1)[:, None], init, jnp.where((t < t_in - 1)[:, None], rec, NEG_INF))
        row = jnp.where(exists, row, NEG_INF)
        return row, row

    ts = jnp.arange(steps)
    _, beta = lax.scan(step, jnp.full((n, states), NEG_INF, lp_ext.dtype),
                       (ts[::-1], jnp.moveaxis(lp_ext, 1, 0)[::-1]))
    log_beta = jnp.moveaxis(beta[::-1], 0, 1)  # (N, T, S')
    ab = jnp.where(exists[:, None], log_alpha + log_beta, NEG_INF)
    onehot = jax.nn.one_hot(ext, classes, dtype=bool)  # (N, S', C)
    per_class = jax.nn.logsumexp(jnp.where(onehot[:, None], ab[..., None], NEG_INF), axis=2)  # (N, T, C)
    lp = jnp.moveaxis(log_probs, 1, 0)  # (N, T, C)
    g = (jnp.exp(lp) - jnp.exp(per_class + nll[:, None, None] - lp)) * grad[:, None, None]
    keep = ts[None, :, None] < t_in[:, None, None]
    if zero_infinity:
        keep = keep & (nll != jnp.inf)[:, None, None]
    return jnp.moveaxis(jnp.where(keep, g, 0.0), 0, 1).astype(log_probs.dtype)
