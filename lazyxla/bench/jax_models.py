"""The reference models and optimizers as pure JAX functions (the JAX limit).

Parameters come from the same torch modules (lazyxla/workloads.py), exported
to .npz by `export.py` with their `state_dict` names, so step-0 losses agree
with lazyxla and eager. The optimizers follow torch.optim's formulas exactly:
SGD(lr, momentum=0.9) and AdamW(lr, betas=(0.9, 0.999), eps=1e-8,
weight_decay=0.01) with bias correction.

`amp` (a JAX dtype, e.g. bfloat16; None = float32 throughout) writes out what
torch.autocast does to the same models on lazyxla's device, which uses PyTorch's shared
autocast op lists (lazyxla/frontend/autocast_lists.py): parameters, gradients and the
optimizer stay float32; the ops of AUTOCAST_POLICY run as their list says; every other op
runs in its inputs' dtype, with type promotion where float32 meets the lower dtype (the
residual stream stays float32).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

# The torch ops of W1/W2 that autocast's lists name, and their policy (checked against
# torch's header in tests/test_bench.py): "lower_precision_fp" casts the inputs to the
# autocast dtype, "fp32" and "fp32_set_opt_dtype" compute (and return) float32.
AUTOCAST_POLICY = {"linear": "lower_precision_fp", "matmul": "lower_precision_fp", "layer_norm": "fp32",
                   "softmax.int": "fp32_set_opt_dtype", "log_softmax.int": "fp32_set_opt_dtype",
                   "nll_loss": "fp32"}
# ... and those no list names: they run in their inputs' dtype
AUTOCAST_UNLISTED = ("embedding", "gelu", "relu", "masked_fill.Scalar", "mul.Tensor", "add.Tensor")


# -- models -------------------------------------------------------------------------------

def _matmul(a, b, amp):
    """a @ b; under autocast ("lower_precision_fp") both in the lower dtype, accumulated in
    float32 and rounded once, as torch's bf16 kernels and lazyxla's rule do."""
    if amp is None:
        return a @ b
    return jnp.matmul(a.astype(amp), b.astype(amp), preferred_element_type=jnp.float32).astype(amp)


def _linear(p, name, x, amp=None):
    y = _matmul(x, p[name + ".weight"].T, amp)
    b = p.get(name + ".bias")
    return y if b is None else y + (b if amp is None else b.astype(amp))


def mlp_logits(p, x, amp=None):
    h = jax.nn.relu(_linear(p, "0", x, amp))
    h = jax.nn.relu(_linear(p, "2", h, amp))
    return _linear(p, "4", h, amp)


def _layer_norm(p, name, x, eps=1e-5):
    x = x.astype(jnp.float32)   # autocast: "fp32"
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def _block(p, name, x, mask, heads, amp):
    b, t, d = x.shape
    hd = d // heads
    qkv = _linear(p, name + ".qkv", _layer_norm(p, name + ".ln1", x), amp)
    q, k, v = (a.reshape(b, t, heads, hd).transpose(0, 2, 1, 3) for a in jnp.split(qkv, 3, axis=2))
    att = _matmul(q, k.transpose(0, 1, 3, 2), amp) * (1.0 / hd ** 0.5)
    att = jnp.where(mask[:t, :t], -jnp.inf, att)
    att = jax.nn.softmax(att.astype(jnp.float32), axis=-1)   # autocast: "fp32_set_opt_dtype"
    y = _matmul(att, v, amp).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + _linear(p, name + ".proj", y, amp)
    h = _linear(p, name + ".fc", _layer_norm(p, name + ".ln2", x), amp)
    # torch computes a lower-precision GELU in float32 and rounds the result once
    h = jax.nn.gelu(h.astype(jnp.float32), approximate=False).astype(h.dtype)
    return x + _linear(p, name + ".out", h, amp)


def gpt_logits(p, idx, heads=4, amp=None):
    t = idx.shape[1]
    seq = p["pos.weight"].shape[0]
    mask = jnp.triu(jnp.ones((seq, seq), dtype=bool), 1)
    x = p["tok.weight"][idx] + p["pos.weight"][jnp.arange(t)]
    n_layers = len({k.split(".")[1] for k in p if k.startswith("blocks.")})
    for i in range(n_layers):
        x = _block(p, f"blocks.{i}", x, mask, heads, amp)
    return _linear(p, "head", _layer_norm(p, "ln", x), amp)


LOGITS = {"mlp": mlp_logits, "gpt": gpt_logits}


def cross_entropy(logits, targets):
    logits = logits.astype(jnp.float32).reshape(-1, logits.shape[-1])   # autocast: log_softmax, nll_loss
    targets = targets.reshape(-1)
    picked = jnp.take_along_axis(logits, targets[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def loss_fn(name, amp=None, **hyper):
    logits = LOGITS[name]
    return lambda p, x, y: cross_entropy(logits(p, x, amp=amp, **hyper), y)


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
    """The pure training step: forward, backward and optimizer update (`hyper`: the GPT's
    `heads`, the autocast dtype `amp`). W5 accum: W2's model over micro-batches (leading
    dimension of x and y) summed in a `lax.scan`, then one update; the loss is the mean
    over micro-batches."""
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
