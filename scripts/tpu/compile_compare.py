"""Compile times on the chip: a hand-written JAX training step of the Trainer's models beside
lazyxla's own step graphs (StableHLO dumped with JAX_DUMP_IR_TO), with 64-bit types narrowed
or not, each compile timed in its own process (a slow one is cut by the caller's timeout).

    python scripts/tpu/compile_compare.py jax bert|gpt2 [highest|high|default]
    python scripts/tpu/compile_compare.py jax-opt[+grads][+steps] bert|gpt2 [highest|high|default]
    python scripts/tpu/compile_compare.py mlir FILE asis|f64|i64|f64i64
    python scripts/tpu/compile_compare.py mlir-pair FILE FILE   (both at once, two threads)
    python scripts/tpu/compile_compare.py jax-split bert|gpt2 [PRECISION]   (the step in two halves, compiled at once)

`bert` is BERT-base for sequence classification (batch 8, seq 128); `gpt2` GPT-2 small as an
LM (batch 8, seq 128); both random-init, AdamW, float32, the shapes the Trainer runs.
The JAX steps lower at JAX's default matmul precision unless a level is named: lazyxla's
graphs are lowered at "highest" unless the program chose another (compare like with like).
`jax-opt` compiles the Trainer's optimizer graph's work alone: the gradients clipped to
global norm 1 (the Trainer's `max_grad_norm`), then AdamW, parameters and state donated;
`+grads` and `+steps` add what lazyxla's graph of that work has besides (`jax_opt_compile`),
to bisect the difference between the two compiles.
"""
from __future__ import annotations

import os
import re
import sys
import time

# importing lazyxla (jax_models below) turns on JAX's persistent compile cache: a JAX step
# compiled twice on one machine would time a read from disk
os.environ["LAZYXLA_CACHE_DIR"] = ""

import jax
import jax.numpy as jnp
import numpy as np

from lazyxla.bench.jax_models import _layer_norm, adamw_init, adamw_update, cross_entropy

BATCH, SEQ, D, LAYERS, HEADS = 8, 128, 768, 12, 12


def _dense(rng, name, n_in, n_out, p):
    p[name + ".weight"] = jnp.asarray(rng.standard_normal((n_out, n_in), np.float32) * 0.02)
    p[name + ".bias"] = jnp.zeros((n_out,), jnp.float32)


def _norm(name, p):
    p[name + ".weight"], p[name + ".bias"] = jnp.ones((D,), jnp.float32), jnp.zeros((D,), jnp.float32)


def _lin(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def _attention(p, name, x, bias, causal):
    b, t, _ = x.shape
    q, k, v = (_lin(p, f"{name}.{n}", x).reshape(b, t, HEADS, D // HEADS).transpose(0, 2, 1, 3) for n in "qkv")
    att = q @ k.transpose(0, 1, 3, 2) / (D // HEADS) ** 0.5 + bias
    if causal:
        att = jnp.where(jnp.tril(jnp.ones((t, t), bool)), att, jnp.finfo(jnp.float32).min)
    y = jax.nn.softmax(att, axis=-1) @ v
    return _lin(p, name + ".o", y.transpose(0, 2, 1, 3).reshape(b, t, D))


def params(model: str, vocab: int) -> dict:
    rng, p = np.random.default_rng(0), {}
    p["tok.weight"] = jnp.asarray(rng.standard_normal((vocab, D), np.float32) * 0.02)
    p["pos.weight"] = jnp.asarray(rng.standard_normal((512, D), np.float32) * 0.02)
    for i in range(LAYERS):
        for n in "qkvo":
            _dense(rng, f"l{i}.{n}", D, D, p)
        _dense(rng, f"l{i}.fc", D, 4 * D, p)
        _dense(rng, f"l{i}.out", 4 * D, D, p)
        _norm(f"l{i}.ln1", p)
        _norm(f"l{i}.ln2", p)
    _norm("ln", p)
    if model == "bert":
        p["type.weight"] = jnp.zeros((2, D), jnp.float32)
        _dense(rng, "pool", D, D, p)
        _dense(rng, "cls", D, 2, p)
    return p


def bert_loss(p, ids, mask, labels):   # post-norm encoder, pooler, classifier (BertForSequenceClassification)
    x = _layer_norm(p, "ln", p["tok.weight"][ids] + p["pos.weight"][:ids.shape[1]] + p["type.weight"][0], 1e-12)
    bias = jnp.where(mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min)
    for i in range(LAYERS):
        x = _layer_norm(p, f"l{i}.ln1", x + _attention(p, f"l{i}", x, bias, False), 1e-12)
        x = _layer_norm(p, f"l{i}.ln2", x + _lin(p, f"l{i}.out", jax.nn.gelu(_lin(p, f"l{i}.fc", x), approximate=False)), 1e-12)
    logits = _lin(p, "cls", jnp.tanh(_lin(p, "pool", x[:, 0])))
    return cross_entropy(logits, labels)


def gpt2_loss(p, ids, mask, labels):   # pre-norm decoder, tied LM head, shifted labels (GPT2LMHeadModel)
    x = p["tok.weight"][ids] + p["pos.weight"][:ids.shape[1]]
    for i in range(LAYERS):
        x = x + _attention(p, f"l{i}", _layer_norm(p, f"l{i}.ln1", x), 0.0, True)
        x = x + _lin(p, f"l{i}.out", jax.nn.gelu(_lin(p, f"l{i}.fc", _layer_norm(p, f"l{i}.ln2", x)), approximate=True))
    logits = _layer_norm(p, "ln", x) @ p["tok.weight"].T
    return cross_entropy(logits[:, :-1], labels[:, 1:])


def _step_and_args(model: str):
    vocab, loss = (30522, bert_loss) if model == "bert" else (50257, gpt2_loss)
    p = params(model, vocab)

    def step(p, state, ids, mask, labels):
        value, grads = jax.value_and_grad(loss)(p, ids, mask, labels)
        p, state = adamw_update(p, grads, state, lr=1e-4)
        return p, state, value

    ids = jnp.zeros((BATCH, SEQ), jnp.int32)
    labels = jnp.zeros((BATCH,), jnp.int32) if model == "bert" else ids
    return step, (p, adamw_init(p), ids, jnp.ones_like(ids), labels)


def jax_compile(model: str) -> float:
    step, args = _step_and_args(model)
    lowered = jax.jit(step, donate_argnums=(0, 1)).lower(*args)
    started = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - started


def jax_split_compile(model: str) -> float:
    """Wall seconds to compile the JAX step cut as lazyxla cuts a large graph
    (lazyxla/compile/split.py: halves, each cut again while it has at least
    $LAZYXLA_SPLIT_COMPILE_MIN_EQUATIONS equations; unset or 0: once), the pieces at once;
    their results checked against the whole step's."""
    from lazyxla.compile.split import lower_in_pieces
    step, args = _step_and_args(model)
    flat, tree = jax.tree.flatten(args)

    def flat_step(*leaves):
        return jax.tree.leaves(step(*jax.tree.unflatten(tree, leaves)))

    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding) for x in flat]
    least = int(os.environ.get("LAZYXLA_SPLIT_COMPILE_MIN_EQUATIONS") or 0)
    closed = jax.make_jaxpr(flat_step)(*avals)
    lowered = lower_in_pieces(closed, avals, min_equations=least)
    started = time.perf_counter()
    halves = lowered.compile()
    seconds = time.perf_counter() - started
    print(f"pieces compiled in {seconds:.1f} s", flush=True)   # before the check, which compiles the whole step
    got = halves(*flat)
    pairs = list(zip(got, jax.jit(flat_step)(*flat)))
    error = max(float(jnp.max(jnp.abs(a - b))) for a, b in pairs)
    # float32 rounding: XLA fuses and orders reductions differently in the pieces (the whole
    # step's own error against a float64 run is as large, checked on CPU for BERT-base)
    largest = max(float(jnp.max(jnp.abs(b))) for _, b in pairs)
    print(f"{len(closed.jaxpr.eqns)} equations in {len(lowered.pieces())} pieces; max difference from the "
          f"whole step {error:.2g}, the outputs' largest value {largest:.2g}", flush=True)
    return seconds


def _adamw_per_parameter_steps(p, grads, state, lr=1e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
    """AdamW as torch's fused kernel takes it: a step count per parameter (torch.optim keeps
    one tensor each), so each parameter computes its own bias corrections."""
    out_p, out_state = {}, {"step": {}, "exp_avg": {}, "exp_avg_sq": {}}
    for name in p:
        step = state["step"][name] + 1
        g, m, v = grads[name], state["exp_avg"][name], state["exp_avg_sq"][name]
        m = m + (g - m) * (1 - b1)
        v = v * b2 + (1 - b2) * g * g
        step_size = lr / (1 - b1 ** step)
        bc2_sqrt = jnp.sqrt(1 - b2 ** step)
        out_p[name] = p[name] * (1 - lr * weight_decay) - step_size * m / (jnp.sqrt(v) / bc2_sqrt + eps)
        out_state["step"][name], out_state["exp_avg"][name], out_state["exp_avg_sq"][name] = step, m, v
    return out_p, out_state


def jax_opt_compile(model: str, variant: str = "") -> float:
    """The optimizer graph's work in JAX; `variant` adds what lazyxla's graph of it has:
    `grads` returns the clipped gradients too (the Trainer's `p.grad` are live at the
    barrier, so they are outputs), `steps` takes a step count per parameter (torch's AdamW)."""
    p = params(model, 30522 if model == "bert" else 50257)
    per_parameter = "steps" in variant
    state = adamw_init(p)
    if per_parameter:
        state["step"] = {name: jnp.zeros((), jnp.float32) for name in p}

    def step(p, state, grads):
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
        scale = jnp.minimum(1.0, 1.0 / (norm + 1e-6))
        clipped = jax.tree.map(lambda g: g * scale, grads)
        update = _adamw_per_parameter_steps if per_parameter else adamw_update
        new_p, new_state = update(p, clipped, state, lr=1e-4)
        return (new_p, new_state, clipped) if "grads" in variant else (new_p, new_state)

    lowered = jax.jit(step, donate_argnums=(0, 1, 2) if "grads" in variant else (0, 1)).lower(p, state, p)
    started = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - started


def narrow(text: str, mode: str) -> str:
    """StableHLO text with 64-bit tensor types made 32-bit (`f64`, `i64` or both in `mode`)."""
    if "f64" in mode:
        text = re.sub(r"tensor<((?:\d+x)*)f64>", r"tensor<\1f32>", text)
    if "i64" in mode:
        text = re.sub(r"tensor<((?:\d+x)*)(u?)i64>", r"tensor<\1\2i32>", text)
    return text


def mlir_compile(path: str, mode: str) -> float:
    from jax._src import compiler, xla_bridge
    from jax._src.lib import xla_client as xc
    text = open(path).read()
    text = text if mode == "asis" else narrow(text, mode)
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
    backend, devices = xla_bridge.get_backend(), xc.DeviceList(tuple(jax.devices()[:1]))   # the chip opens outside the clock
    started = time.perf_counter()
    backend.compile_and_load(text, devices, options)
    return time.perf_counter() - started


def mlir_pair_compile(first: str, second: str) -> float:
    """Wall seconds to compile two dumped graphs at once, one thread each: whether XLA's
    compiles overlap (the sum of `mlir` times if they do not)."""
    from concurrent.futures import ThreadPoolExecutor
    jax.devices()   # open the chip before the clock starts
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(mlir_compile, (first, second), ("asis", "asis")))
    return time.perf_counter() - started


if __name__ == "__main__":
    kind = sys.argv[1]
    cpu_started = time.process_time()
    if kind == "mlir":
        seconds = mlir_compile(sys.argv[2], sys.argv[3])
    elif kind == "mlir-pair":
        seconds = mlir_pair_compile(sys.argv[2], sys.argv[3])
    else:
        with jax.default_matmul_precision(sys.argv[3] if len(sys.argv) > 3 else None):
            if kind.startswith("jax-opt"):   # jax-opt, jax-opt+grads, jax-opt+steps, jax-opt+grads+steps
                seconds = jax_opt_compile(sys.argv[2], kind[len("jax-opt"):])
            else:
                seconds = {"jax": jax_compile, "jax-split": jax_split_compile}[kind](sys.argv[2])
    print(f"COMPILE {kind} {' '.join(sys.argv[2:])} {seconds:.1f} s on {jax.devices()[0].device_kind}"
          f" (process CPU {time.process_time() - cpu_started:.1f} s)", flush=True)
