"""Where one lazy W2 training step's host time goes, phase by phase.

    python scripts/step_phases.py [--size proxy|reference|gpt2] [--steps 30] [--mode lazy|compiled]

Trains W2's GPT (lazyxla/workloads.py) and prints the median per step of: the forward
pass's tracing, the backward pass's, `optimizer.step()` (its tracing and the implied step
barrier), the wait for the device; inside the barrier, the sync stages (collect, donor
plan, cache lookup, execute, install); Python's garbage collections by generation and
their time; and how many executable calls took JAX's Python path instead of its C++
dispatch. Sizes: `proxy` d 64 / 4 layers / seq 32 / batch 2 (the CPU proxy of a TPU step),
`reference` W2 itself, `gpt2` 12 layers / d 768 / seq 512 / batch 8.
"""
from __future__ import annotations

import argparse
import collections
import gc
import importlib
import statistics
import time

import torch
from jax._src import stages

import lazyxla as lx
from lazyxla import workloads as W

SIZES = {"proxy": (dict(d=64, heads=4, layers=4, seq=32), 2),
         "reference": ({}, 8),
         "gpt2": (dict(vocab=50304, d=768, heads=12, layers=12, seq=512), 8)}
STAGES = ("collect", "plan_donors", "get_or_compile", "execute", "install")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="proxy")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--mode", choices=("lazy", "compiled"), default="lazy")
    opts = parser.parse_args()
    api = importlib.import_module("lazyxla.sync.pipeline")   # where the stages' callees are named
    stage_time: dict = collections.defaultdict(float)
    for name in STAGES:
        original = getattr(api, name)

        def timed(*args, _original=original, _name=name, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                stage_time[_name] += time.perf_counter() - start
        setattr(api, name, timed)
    python_path = [0]
    slow_call = stages.Compiled.call

    def counted(*args, **kwargs):
        python_path[0] += 1
        return slow_call(*args, **kwargs)
    stages.Compiled.call = staticmethod(counted)
    collections_seen: list = []

    def on_gc(phase, info):
        if phase == "start":
            on_gc.start = time.perf_counter()
        else:
            collections_seen.append((info["generation"], time.perf_counter() - on_gc.start))
    gc.callbacks.append(on_gc)

    overrides, batch = SIZES[opts.size]
    _, x, y, opt, loss_of = W.gpt_training(W.GPTConfig(**overrides), batch, lx.device())
    step = opt.step
    if opts.mode == "compiled":
        loss_of = torch.compile(loss_of, backend="lazyxla")
        step = torch.compile(opt.step, backend="lazyxla")
    phases: dict = collections.defaultdict(list)
    first = time.perf_counter()
    for i in range(opts.warmup + opts.steps):
        if i == 1:
            print(f"first step {time.perf_counter() - first:.2f} s")
        if i == opts.warmup:
            stage_time.clear()
            collections_seen.clear()
            python_path[0] = 0
            lx.metrics.clear_all()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        step()
        t3 = time.perf_counter()
        lx.sync()
        lx.wait_device_ops()
        t4 = time.perf_counter()
        for name, seconds in zip(("forward", "backward", "optimizer.step", "sync+wait", "step"),
                                 (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
            phases[name].append(seconds)
    n = opts.steps
    print(f"W2 {opts.size} {opts.mode} on {lx.platform()}: loss {loss.item():.5f}, "
          f"{(lx.metrics.counter_value('TracedOps') or 0) / n:.0f} traced ops, "
          f"{(lx.metrics.counter_value('ExecuteComputation') or 0) / n:.1f} graphs, "
          f"{lx.metrics.counter_value('UncachedCompile') or 0} compiles after warm-up")
    for name, values in phases.items():
        print(f"  {name:16s} {statistics.median(values) * 1e3:8.2f} ms")
    for name in STAGES:
        print(f"    {name:14s} {stage_time[name] / n * 1e3:8.2f} ms")
    by_gen = collections.Counter(g for g, _ in collections_seen)
    print(f"  gc: {len(collections_seen) / n:.2f} collections a step (gen0 {by_gen[0]}, gen1 {by_gen[1]}, "
          f"gen2 {by_gen[2]} in {n} steps), {sum(s for _, s in collections_seen) / n * 1e3:.2f} ms a step")
    print(f"  executable calls on JAX's Python path: {python_path[0]} in {n} steps")


if __name__ == "__main__":
    main()
