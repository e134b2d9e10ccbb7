"""Python time per W2 (gpt) / W1 (mlp) training step, lazy vs compiled.

    python scripts/compiled_step_profile.py [gpt|mlp] [--profile] [--steps N]

Tracing = the step's Python until `lx.sync()` returns (the device work is waited
for before each step, so it does not share the cores). Prints the median of N
steady steps and the first step's time per mode; --profile dumps cProfile's top
functions (cumulative) for the compiled steady steps.
"""
from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time

import torch

import lazyxla as lx
from lazyxla import workloads


def make_step(name: str, compiled: bool):
    """The reference workload on the device: a function running one training step up
    to (not including) `lx.sync()` and returning its loss; also used by
    compiled_step_breakdown.py."""
    wl = workloads.make(name)
    dev = lx.device()
    model = wl.model.to(dev)
    x, y = wl.inputs.to(dev), wl.targets.to(dev)
    opt = wl.optimizer(model.parameters(), foreach=True)
    comp = (lambda f: torch.compile(f, backend="lazyxla")) if compiled else (lambda f: f)
    mfn, lfn, sfn = comp(model), comp(wl.loss), comp(opt.step)

    def step():
        opt.zero_grad()
        loss = lfn(mfn, x, y)
        loss.backward()
        sfn()
        return loss

    lx.sync()
    lx.wait_device_ops()
    return step


def run(name: str, compiled: bool, steps: int, profile: bool):
    step = make_step(name, compiled)
    times = []
    prof = cProfile.Profile() if profile else None
    for i in range(steps + 3):
        lx.wait_device_ops()
        t0 = time.perf_counter()
        if prof and i >= 3:
            prof.enable()
        loss = step()
        lx.sync()
        if prof and i >= 3:
            prof.disable()
        times.append(time.perf_counter() - t0)
        if i == 0:
            lx.wait_device_ops()
            times[0] = time.perf_counter() - t0
    lx.wait_device_ops()
    loss_v = float(loss.cpu())
    return times[0], statistics.median(times[3:]), loss_v, prof


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "gpt"
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
    profile = "--profile" in sys.argv
    modes = [True] if "--compiled-only" in sys.argv or profile else [False, True]
    for compiled in modes:
        first, med, loss, prof = run(name, compiled, steps, profile)
        print(f"{name} {'compiled' if compiled else 'lazy':8s} first step {first:.2f} s  "
              f"steady trace {med * 1e3:.2f} ms  loss {loss:.6f}")
        if prof:
            st = pstats.Stats(prof).sort_stats("cumulative")
            st.print_stats(60)
            st.sort_stats("tottime").print_stats(40)
