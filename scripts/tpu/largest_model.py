"""The deepest W2 at GPT-2 width that trains on this device, per system (issue 49 item 6).

    python scripts/tpu/largest_model.py SYSTEM [--amp bf16] [--budget-s 540] [--near L]
                                           [--size gpt2|gpt2-seq1024|proxy] [--limit-gib G]

SYSTEM: `lazyxla` (lazy mode, donation on), `lazyxla-nodonate` (`LAZYXLA_ALIASING=0`),
`jax` (the hand-written `jax.jit` step, parameters and optimizer state donated: the bench's
JAX limit), `jax-nodonate`. The model is W2's GPT (lazyxla/workloads.py) at the bench's
"gpt2" size (d 768, 12 heads, seq 512, batch 8, vocab 50,304; `gpt2-seq1024` the same at
1,024 tokens; `--size proxy` to try the script on a CPU), AdamW, `--amp bf16` under
autocast (JAX: the same casts written out), with as many layers as the probe asks.

A probe is a child process that builds the model with L layers and trains two steps; it
prints `PROBE L ok PEAK` or `PROBE L oom SOURCE` (`check`: lazyxla's check before
running; `xla`: XLA's refusal). PEAK is lazyxla's ledger peak, or for JAX XLA's memory
analysis of the step (arguments, outputs and temporaries, less what aliases). Memory grows
linearly in depth, so two shallow probes (2 and 4 layers) give bytes a layer and bytes for
the rest; the search starts at the depth that estimate fits in the device's limit and steps
by one towards the boundary (L trains, L + 1 runs out of memory) while the budget lasts.
`--near L` skips the estimate and starts there. Each probe's line is printed as it ends;
the last line says what was found: `LARGEST SYSTEM AMP L` with the first depth that did
not fit, or what is still open.
`--limit-gib` pretends the device holds that much: the estimate uses it, and lazyxla's
probes refuse a graph beyond it as they would on a full device (the script's own test runs
the search that way on a CPU); JAX's probes know only the real limit.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SYSTEMS = ("lazyxla", "lazyxla-nodonate", "jax", "jax-nodonate")
# --size: the bench's W2 sizes, and GPT-2's width at 1,024 tokens, where a layer holds about
# four times the activations: the boundary lies near 10 layers, whose probes compile in a
# fraction of the time 40 layers at 512 tokens take on the chip
SIZES = {"gpt2": "gpt2", "proxy": "proxy", "gpt2-seq1024": "gpt2"}
SEQ = {"gpt2-seq1024": 1024}
SIZE = ["gpt2"]   # --size
LIMIT: list = [None]   # bytes the device pretends to hold (--limit-gib)


def _model_and_batch(layers: int):
    import torch
    from lazyxla import workloads as W
    from lazyxla.bench.plan import GPT_SIZES
    fields, batch = GPT_SIZES[SIZES[SIZE[0]]]
    fields = {**(fields or {}), **({"seq": SEQ[SIZE[0]]} if SIZE[0] in SEQ else {})}
    cfg = W.GPTConfig(**{**fields, "layers": layers})
    torch.manual_seed(0)
    model = W.gpt(cfg)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=torch.Generator().manual_seed(1))
    return model, cfg, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _probe_lazyxla(layers: int, amp: str) -> int:
    import contextlib
    import torch
    import lazyxla as lx
    from lazyxla.runtime import memory
    model, cfg, x, y = _model_and_batch(layers)
    dev = lx.device()
    model, x, y = model.to(dev), x.to(dev), y.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    with memory.limit_for_testing(0, LIMIT[0]) if LIMIT[0] else contextlib.nullcontext():
        _train_lazyxla(model, opt, x, y, amp)
    return lx.memory_info()["peak_bytes_used"]


def _train_lazyxla(model, opt, x, y, amp: str) -> None:
    import contextlib
    import torch
    import torch.nn.functional as F
    import lazyxla as lx
    def loss_of(x, y):   # the logits die here, as in W2's step: live at the barrier, they
        logits = model(x)   # would be one more output of the step (batch x seq x vocab)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("lazyxla", dtype=torch.bfloat16) if amp == "bf16" else contextlib.nullcontext():
            loss = loss_of(x, y)
        loss.backward()
        opt.step()
        lx.sync()
    loss.item()


def _probe_jax(layers: int, amp: str, donate: bool) -> int:
    import jax.numpy as jnp
    from lazyxla.bench.jax_limit import compiled_memory
    from lazyxla.bench.jax_models import OPTIMIZERS, make_train_step
    model, cfg, x, y = _model_and_batch(layers)
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.state_dict().items()}
    del model
    hyper = {"heads": cfg.heads} | ({"amp": jnp.bfloat16} if amp == "bf16" else {})
    init, _ = OPTIMIZERS["gpt"]
    state = init(params)
    x, y = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())
    step = make_train_step("gpt", donate=donate, **hyper).lower(params, state, x, y).compile()
    for _ in range(2):
        params, state, loss = step(params, state, x, y)
    float(loss)
    # XLA's figures for the step, not the allocator's peak: on the TPU that peak left out
    # the step's temporaries (1.05 GiB at 2 layers, less than the logits alone)
    return compiled_memory(step)["peak_estimate_bytes"]


def probe(system: str, layers: int, amp: str) -> None:
    """One probe, in this process: prints its PROBE line."""
    from lazyxla.runtime.memory import is_out_of_memory
    try:
        peak = (_probe_lazyxla(layers, amp) if system.startswith("lazyxla")
                else _probe_jax(layers, amp, donate=system == "jax"))
    except Exception as e:   # noqa: BLE001 - any other error is the probe's answer too
        if not is_out_of_memory(e):
            raise
        # lazyxla's own check before running (XLA's figures against the limit) or XLA's refusal
        source = "check" if str(e).startswith("lazyxla: out of memory") else "xla"
        print(f"PROBE {layers} oom {source}", flush=True)
        return
    print(f"PROBE {layers} ok {peak}", flush=True)


def _child(system: str, layers: int, amp: str, timeout: float):
    """(fits, peak bytes) of a probe in a child process; None when it ran out of time."""
    env = dict(os.environ)
    if system == "lazyxla-nodonate":
        env["LAZYXLA_ALIASING"] = "0"
    started = time.time()
    try:
        limit = ["--limit-gib", str(LIMIT[0] / 2**30)] if LIMIT[0] else []
        p = subprocess.run([sys.executable, __file__, system, "--amp", amp, "--size", SIZE[0], *limit,
                            "--probe", str(layers)],
                           env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {layers} layers: not done in {timeout:.0f} s", flush=True)
        return None
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("PROBE")), None)
    if line is None:
        tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"probe of {layers} layers failed (exit {p.returncode}): " + " | ".join(tail))
    parts = line.split()
    fits = parts[2] == "ok"
    peak = int(parts[3]) if fits else None
    print(f"  {layers} layers: {'trains, peak %.2f GiB' % (peak / 2**30) if fits else 'out of memory (%s)' % parts[3]} "
          f"({time.time() - started:.0f} s)", flush=True)
    return fits, peak


def _limit() -> int:
    """The device's memory limit, read in a child: this process must not hold the chip
    while the probes run."""
    code = "import jax; print(jax.devices()[0].memory_stats()['bytes_limit'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError("the device reports no memory limit: pass --limit-gib")
    return int(out.stdout.strip())


def search(system: str, amp: str, budget_s: float, near: int | None) -> None:
    deadline = time.time() + budget_s
    left = lambda: deadline - time.time()   # noqa: E731
    if near is None:
        shallow = [_child(system, n, amp, left()) for n in (2, 4)]
        if any(r is None or not r[0] for r in shallow):
            print(f"LARGEST {system} {amp} open: a shallow probe did not train", flush=True)
            return
        (_, p2), (_, p4) = shallow
        per_layer = (p4 - p2) / 2
        limit = LIMIT[0] or _limit()
        near = int((limit - (p2 - 2 * per_layer)) // per_layer)
        print(f"  estimate: {per_layer / 2**20:.0f} MiB a layer, {(p2 - 2 * per_layer) / 2**30:.2f} GiB besides, "
              f"limit {limit / 2**30:.2f} GiB: {near} layers", flush=True)
    fits_at, oom_at, layers = None, None, near
    while left() > 0 and (fits_at is None or oom_at is None):
        result = _child(system, layers, amp, left())
        if result is None:
            break
        if result[0]:
            fits_at = max(fits_at or 0, layers)
            layers += 1
        else:
            oom_at = min(oom_at or layers, layers)
            layers -= 1
    if fits_at is not None and oom_at == fits_at + 1:
        print(f"LARGEST {system} {amp} {fits_at} (out of memory at {oom_at})", flush=True)
    else:
        print(f"LARGEST {system} {amp} open: trains at {fits_at}, out of memory at {oom_at}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=SYSTEMS)
    parser.add_argument("--amp", choices=("none", "bf16"), default="none")
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--near", type=int, help="start the search at this depth (no estimate)")
    parser.add_argument("--size", choices=tuple(SIZES), default="gpt2")
    parser.add_argument("--limit-gib", type=float, help="the memory limit to estimate against (default: the device's)")
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)   # a child's one probe
    opts = parser.parse_args()
    SIZE[0] = opts.size
    LIMIT[0] = int(opts.limit_gib * 2**30) if opts.limit_gib else None
    if opts.probe is not None:
        probe(opts.system, opts.probe, opts.amp)
    else:
        search(opts.system, opts.amp, opts.budget_s, opts.near)


if __name__ == "__main__":
    main()
