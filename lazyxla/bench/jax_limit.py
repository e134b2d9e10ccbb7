"""The JAX limit: each workload written directly in JAX, one `jax.jit` per step
with the state donated. What lazyxla could reach with zero runtime overhead."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from . import measure as M
from .export import load_workload
from .jax_models import OPTIMIZERS, make_train_step, train_step_fn
from .plan import AMP_DTYPES


def compiled_memory(compiled) -> dict:
    """XLA's memory figures for a compiled step, with the peak they imply."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
              "temp_size_in_bytes", "generated_code_size_in_bytes")
    m = {f: int(getattr(stats, f, 0) or 0) for f in fields}
    m["peak_estimate_bytes"] = (m["argument_size_in_bytes"] + m["output_size_in_bytes"]
                                - m["alias_size_in_bytes"] + m["temp_size_in_bytes"])
    return m


def _spmd_shardings(kind: str, params, state, x, y) -> tuple:
    """--spmd: the shardings lazyxla's SPMD mode gives the same step on a 1-D mesh over
    all devices: the batch split on dim 0; "fsdp" also splits every parameter (and its
    optimizer state) whose first dimension the mesh divides (lx.spmd.shard_parameters)."""
    mesh = Mesh(np.array(jax.devices()), ("data",))
    n = mesh.devices.size

    def of(a):
        split = kind == "fsdp" and a.ndim and a.shape[0] % n == 0
        return NamedSharding(mesh, P("data") if split else P())

    batch = NamedSharding(mesh, P("data"))
    return jax.tree.map(of, params), jax.tree.map(of, state), batch, batch


def train(cell, settings) -> dict:
    arrays, meta = load_workload(cell.extra["npz"])
    params = {k: jnp.asarray(v) for k, v in arrays.items()}
    x, y = jnp.asarray(meta["inputs"]), jnp.asarray(meta["targets"])
    if "micro" in meta:   # W5: micro-batches along a new leading dimension, as the torch loops do
        x, y = (t.reshape(int(meta["micro"]), -1, *t.shape[1:]) for t in (x, y))
    hyper = {"heads": int(meta["heads"])} if "heads" in meta else {}
    if cell.amp:   # autocast's mixed precision written out (jax_models.py)
        hyper["amp"] = getattr(jnp, AMP_DTYPES[cell.amp])
    rec = {"model_flops_per_step": float(meta["model_flops"]), "amp": cell.amp}
    del arrays, meta
    init, _ = OPTIMIZERS[cell.workload]
    state = init(params)
    shardings = None
    if cell.spmd:
        shardings = _spmd_shardings(cell.spmd, params, state, x, y)
        params, state, x, y = jax.device_put((params, state, x, y), shardings)
    step = make_train_step(cell.workload, shardings=shardings, **hyper)
    jax.block_until_ready((params, state, x, y))
    rec.update({"rss_base_mb": round(M.rss_mb(), 1), "n_params": sum(int(p.size) for p in params.values())})
    losses, step_s, trace_s, compiles, warmup_peak = [], [], [], [], 0.0
    warmup_s, warmup_compiles, faults = [], [], []
    for i in range(settings.warmup + settings.steps):
        if i == settings.warmup:
            warmup_peak = M.peak_rss_mb()   # setup, first step (compile) and warm-up
            M.reset_peak()
        cache_before = step._cache_size()
        faults_before = M.minor_faults()
        t0 = M.now()
        params, state, loss = step(params, state, x, y)
        t1 = M.now()
        jax.block_until_ready((params, state, loss))
        t2 = M.now()
        step_faults = M.minor_faults() - faults_before
        losses.append(float(loss))
        if i == 0:
            rec.update({"first_step_s": round(t2 - t0, 4), "first_trace_s": round(t1 - t0, 4)})
        if i < settings.warmup:
            warmup_s.append(t2 - t0)
            warmup_compiles.append(step._cache_size() - cache_before)
        else:
            step_s.append(t2 - t0)
            trace_s.append(t1 - t0)
            compiles.append(step._cache_size() - cache_before)
            faults.append(step_faults)
    params, state = _pipelined(step, params, state, x, y, settings.steps, rec)
    rec.update({"warmup_s": round(sum(warmup_s), 4), "warmup_compiles": sum(warmup_compiles),
                "step_ms": M.summary(step_s), "trace_ms": M.summary(trace_s),
                "steady_peak_rss_mb": round(M.peak_rss_mb(), 1),
                "peak_rss_mb": round(max(warmup_peak, M.peak_rss_mb()), 1), "losses": losses,
                "minor_faults_per_step": M.counts(faults),
                "compiles_per_step": M.mean(compiles), "graphs_per_step": 1.0})
    # after the measurement: the step's jaxpr size and XLA's memory analysis
    leaves = jax.tree.leaves((params, state))
    rec["donors_per_graph"] = len(leaves)
    rec["params_per_graph"] = len(leaves) + 2
    jaxpr = jax.make_jaxpr(train_step_fn(cell.workload, **hyper))(params, state, x, y)
    rec["traced_ops_per_step"] = len(jaxpr.jaxpr.eqns)
    rec["memory"] = compiled_memory(step.lower(params, state, x, y).compile())
    return rec


def _pipelined(step, params, state, x, y, steps: int, rec: dict) -> tuple:
    """torch_loops._pipelined for the JAX limit: `steps` jitted steps with no wait between
    them, one at the end; adds the same fields to `rec`. Returns the trained state."""
    losses = [None] * steps
    t0 = M.now()
    for i in range(steps):
        params, state, losses[i] = step(params, state, x, y)
    t1 = M.now()
    jax.block_until_ready((params, state, losses))
    t2 = M.now()
    rec.update({"pipelined_ms": M.ms((t2 - t0) / steps), "pipelined_host_ms": M.ms((t1 - t0) / steps),
                "pipelined_losses": [float(loss) for loss in losses]})
    return params, state


def donate(cell, settings) -> dict:
    n = settings.donate_mb * M.MB // 4
    update = jax.jit(lambda w: w * 0.5 + 1.0, donate_argnums=(0,) if cell.aliasing else ())
    w = jnp.ones((n,), jnp.float32).block_until_ready()
    rss_after = M.rss_mb()
    M.reset_peak()
    iter_s = []
    for _ in range(settings.donate_iters):
        t0 = M.now()
        w = update(w)
        w.block_until_ready()
        iter_s.append(M.now() - t0)
    peak = M.peak_rss_mb()
    expected = 2.0 - 0.5 ** settings.donate_iters
    got = float(w[0])
    return {"tensor_mb": settings.donate_mb, "aliasing": cell.aliasing, "rss_after_materialise_mb": round(rss_after, 1),
            "peak_rss_mb_during": round(peak, 1), "peak_delta_mb": round(peak - rss_after, 1),
            "first_step_s": round(iter_s[0], 4), "step_ms": M.summary(iter_s[1:]),
            "value_ok": abs(got - expected) < 1e-6, "value": got,
            "compiles_per_step": 0.0, "graphs_per_step": 1.0, "donors_per_graph": 1 if cell.aliasing else 0,
            "memory": compiled_memory(update.lower(w).compile())}


_CHAIN = (lambda t: t * 0.5, lambda t: t + 1.0, jnp.negative, lambda t: t - 0.25)  # = torch_loops._op_chain


def _chain_fn(n):
    def chain(x):
        for k in range(n):
            x = _CHAIN[k % 4](x)
        return x
    return chain


def trace(cell, settings) -> dict:
    """W4 for JAX: tracing = `make_jaxpr` of a fresh 2000-op function (JAX's
    counterpart of recording the ops); sync = the cached jitted call plus the wait."""
    n = settings.trace_ops
    path = cell.extra.get("trace_input")
    x_np = np.load(path) if path else np.random.default_rng(0).standard_normal(settings.trace_shape, np.float32)
    x = jnp.asarray(x_np)
    run = jax.jit(_chain_fn(n))
    trace_s, sync_s, step_s, compiles = [], [], [], []
    rec = {"ops": n, "shape": list(settings.trace_shape)}
    for i in range(settings.warmup + settings.steps):
        cache_before = run._cache_size()
        t0 = M.now()
        jax.make_jaxpr(_chain_fn(n))(x)     # a new function object: never a tracing-cache hit
        t1 = M.now()
        y = run(x)
        y.block_until_ready()
        t2 = M.now()
        if i == 0:
            rec.update({"first_step_s": round(t2 - t0, 4), "first_trace_us_per_op": round((t1 - t0) / n * 1e6, 3)})
        if i >= settings.warmup:
            trace_s.append(t1 - t0)
            sync_s.append(t2 - t1)
            step_s.append(t2 - t0)
            compiles.append(run._cache_size() - cache_before)
    per_op = [t / n for t in trace_s]
    rec.update({"trace_us_per_op": {k: round(v * 1e3, 3) for k, v in M.summary(per_op).items()},
                "trace_ms": M.summary(trace_s), "sync_ms": M.summary(sync_s), "step_ms": M.summary(step_s),
                "result": float(y.reshape(-1)[0]), "compiles_per_step": M.mean(compiles), "graphs_per_step": 1.0,
                "traced_ops_per_step": n})
    return rec


RUNNERS = {"mlp": train, "gpt": train, "accum": train, "donate": donate, "trace": trace}


def run(cell, settings) -> dict:
    """The JAX limit's record of `cell`, its float32 products at the run's level
    (--matmul-precision: lazyxla's levels are JAX's names), as lazyxla's cells compute."""
    with jax.default_matmul_precision(settings.matmul_precision):
        rec = RUNNERS[cell.workload](cell, settings)
    rec["versions"] = versions()
    return rec


def versions() -> dict:
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "platform": jax.default_backend(),
            "device_kind": jax.devices()[0].device_kind}
