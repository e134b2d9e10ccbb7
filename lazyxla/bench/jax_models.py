"""The reference models and optimizers as pure JAX functions (the JAX limit).

Parameters come from the same torch modules (lazyxla/workloads.py), exported
to .npz by `export.py` with their `state_dict` names, so step-0 losses agree
with lazyxla and eager. The optimizers follow torch.optim's formulas exactly:
SGD(lr, momentum=0.9) and AdamW(lr, betas=(0.9, 0.999), eps=1e-8,
weight_decay=0.01) with bias correction.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


# -- models -------------------------------------------------------------------------------

def _linear(p, name, x):
    y = x @ p[name + ".weight"].T
    b = p.get(name + ".bias")
    return y if b is None else y + b


def mlp_logits(p, x):
    h = jax.nn.relu(_linear(p, "0", x))
    h = jax.nn.relu(_linear(p, "2", h))
    return _linear(p, "4", h)


def _layer_norm(p, name, x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def _block(p, name, x, mask, heads):
    b, t, d = x.shape
    hd = d // heads
    qkv = _linear(p, name + ".qkv", _layer_norm(p, name + ".ln1", x))
    q, k, v = (a.reshape(b, t, heads, hd).transpose(0, 2, 1, 3) for a in jnp.split(qkv, 3, axis=2))
    att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / hd ** 0.5)
    att = jnp.where(mask[:t, :t], -jnp.inf, att)
    att = jax.nn.softmax(att, axis=-1)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + _linear(p, name + ".proj", y)
    h = jax.nn.gelu(_linear(p, name + ".fc", _layer_norm(p, name + ".ln2", x)), approximate=False)
    return x + _linear(p, name + ".out", h)


def gpt_logits(p, idx, heads=4):
    t = idx.shape[1]
    seq = p["pos.weight"].shape[0]
    mask = jnp.triu(jnp.ones((seq, seq), dtype=bool), 1)
    x = p["tok.weight"][idx] + p["pos.weight"][jnp.arange(t)]
    n_layers = len({k.split(".")[1] for k in p if k.startswith("blocks.")})
    for i in range(n_layers):
        x = _block(p, f"blocks.{i}", x, mask, heads)
    return _linear(p, "head", _layer_norm(p, "ln", x))


LOGITS = {"mlp": mlp_logits, "gpt": gpt_logits}


def cross_entropy(logits, targets):
    logits = logits.reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    picked = jnp.take_along_axis(logits, targets[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def loss_fn(name, **hyper):
    logits = LOGITS[name]
    return lambda p, x, y: cross_entropy(logits(p, x, **hyper), y)


# -- optimizers (torch.optim semantics) ----------------------------------------------------

def sgd_init(params):
    return {"momentum": jax.tree.map(jnp.zeros_like, params)}


def sgd_update(params, grads, state, lr=0.01, momentum=0.9):
    # torch: buf = g on the first step, else momentum * buf + g; zeros make both the same
    buf = jax.tree.map(lambda b, g: momentum * b + g, state["momentum"], grads)
    params = jax.tree.map(lambda p, b: p - lr * b, params, buf)
    return params, {"momentum": buf}


def adamw_init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)  # noqa: E731
    return {"step": jnp.zeros((), jnp.float32), "exp_avg": zeros(), "exp_avg_sq": zeros()}


def adamw_update(params, grads, state, lr=3e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
    step = state["step"] + 1
    m = jax.tree.map(lambda m, g: m + (g - m) * (1 - b1), state["exp_avg"], grads)
    v = jax.tree.map(lambda v, g: v * b2 + (1 - b2) * g * g, state["exp_avg_sq"], grads)
    step_size = lr / (1 - b1 ** step)
    bc2_sqrt = jnp.sqrt(1 - b2 ** step)

    def upd(p, m, v):
        p = p * (1 - lr * weight_decay)
        return p - step_size * m / (jnp.sqrt(v) / bc2_sqrt + eps)

    params = jax.tree.map(upd, params, m, v)
    return params, {"step": step, "exp_avg": m, "exp_avg_sq": v}


OPTIMIZERS = {"mlp": (sgd_init, sgd_update), "gpt": (adamw_init, adamw_update)}
OPTIMIZERS["accum"] = OPTIMIZERS["gpt"]


def train_step_fn(name, **hyper):
    """The pure training step: forward, backward and optimizer update. W5 accum:
    W2's model over micro-batches (leading dimension of x and y) summed in a
    `lax.scan`, then one update; the loss is the mean over micro-batches."""
    if name == "accum":
        return _accum_step_fn(**hyper)
    loss = loss_fn(name, **hyper)
    _, update = OPTIMIZERS[name]

    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        params, opt_state = update(params, grads, opt_state)
        return params, opt_state, value

    return step


def _accum_step_fn(**hyper):
    loss = loss_fn("gpt", **hyper)
    _, update = OPTIMIZERS["gpt"]

    def step(params, opt_state, xs, ys):
        def micro_batch(grads, xy):
            value, g = jax.value_and_grad(loss)(params, *xy)
            return jax.tree.map(jnp.add, grads, g), value

        zeros = jax.tree.map(jnp.zeros_like, params)
        grads, values = jax.lax.scan(micro_batch, zeros, (xs, ys))
        n = xs.shape[0]
        params, opt_state = update(params, jax.tree.map(lambda g: g / n, grads), opt_state)
        return params, opt_state, values.mean()

    return step


def make_train_step(name, donate=True, shardings=None, **hyper):
    """One jitted training step with the parameters and optimizer state donated;
    `shardings` = (params, optimizer state, x, y) shardings for an SPMD step (the new
    parameters and state keep theirs, the loss is replicated)."""
    kw = {}
    if shardings is not None:
        p, s, x, y = shardings
        kw = {"in_shardings": (p, s, x, y), "out_shardings": (p, s, None)}
    return jax.jit(train_step_fn(name, **hyper), donate_argnums=(0, 1) if donate else (), **kw)
