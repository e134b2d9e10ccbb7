"""Where a lazy training step's time goes, step by step: GPT-2 124M (bench W6) by default.

    python scripts/first_step_phases.py [--steps 3] [--model gpt2_small]

Uploads the random-init model (lazyxla/bench/hf_models.py) and then, per step, times the
forward, the backward, `opt.step()` (which ends in the implied step barrier: lowering,
XLA compile on the first step, launch), and the wait for the run; with the XLA compile
(`CompileTime`: lowering and compile, or a load from the persistent cache) and the minor
page faults of the step. Set LAZYXLA_CACHE_DIR= for a cold first step.
"""
from __future__ import annotations

import argparse
import resource
import time

import lazyxla as lx
from lazyxla.bench.hf_models import CausalLMWorkload


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--model", default="gpt2_small", help="an arch of lazyxla/bench/hf_models.py")
    args = ap.parse_args()
    start = time.perf_counter()
    wl = CausalLMWorkload(args.model, args.model)
    built = time.perf_counter()
    dev = lx.device()
    model, x, y = wl.model.to(dev), wl.inputs.to(dev), wl.targets.to(dev)
    opt = wl.optimizer(model.parameters())
    lx.sync()
    lx.wait_device_ops()
    print(f"build {built - start:.2f} s, upload {time.perf_counter() - built:.2f} s")
    for i in range(args.steps):
        lx.metrics.clear_all()
        f0, t0 = faults(), time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = wl.loss(model, x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3, f3 = time.perf_counter(), faults()
        lx.wait_device_ops()
        t4 = time.perf_counter()
        compile_ns = (lx.metrics.metric_data("CompileTime") or (0, 0))[1]
        print(f"step {i}: forward {t1 - t0:.2f} backward {t2 - t1:.2f} opt.step+barrier {t3 - t2:.2f} "
              f"(compile {compile_ns / 1e9:.2f}) run {t4 - t3:.2f} total {t4 - t0:.2f} s, "
              f"{faults() - f0} page faults ({faults() - f3} in the run)")


if __name__ == "__main__":
    main()
