"""The main job: train a reference workload on the lazyxla device and explain it.

    python -m lazyxla [--workload gpt|mlp|convnet] [--steps N]

Prints a progress bar, the loss curve summary, lx.metrics.short_report(),
what the steady-state step graph donated and what holds device memory
(lx.debug.memory_report()).
"""
from __future__ import annotations

import argparse
import time

from tqdm import tqdm

import lazyxla as lx
from lazyxla import workloads
from lazyxla.compile import disk_cache


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lazyxla", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="gpt", choices=("gpt", "mlp", "convnet"))
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)

    wl = workloads.make(args.workload)
    dev = lx.device()
    print(f"lazyxla {lx.__version__} on JAX platform '{lx.platform()}', {lx.device_count()} device(s); "
          f"training {args.workload} for {args.steps} steps")
    model = wl.model.to(dev)
    opt = wl.optimizer(model.parameters(), foreach=True)
    inputs, targets = wl.inputs.to(dev), wl.targets.to(dev)

    losses = []
    step_times = []
    disk_hits = 0
    for step in tqdm(range(args.steps), desc=f"train {args.workload}", unit="step"):
        if step == 3:
            disk_hits = lx.metrics.counter_value("PersistentCacheHit") or 0
            lx.metrics.clear_all()  # report the steady state only
        start = time.perf_counter()
        opt.zero_grad()
        loss = wl.loss(model, inputs, targets)
        loss.backward()
        opt.step()
        lx.sync()
        losses.append(loss)  # read after the loop: reading now would wait for the device
        lx.wait_device_ops()
        step_times.append(time.perf_counter() - start)

    values = [float(loss.item()) for loss in losses]
    print("\nloss curve:")
    for i in sorted({0, *range(4, len(values), 5), len(values) - 1}):
        print(f"  step {i:>3}: {values[i]:.4f}")
    steady = sorted(step_times[3:]) or sorted(step_times)
    cache = disk_cache.directory()
    where = (f"{disk_hits} executables loaded from the persistent compile cache {cache}" if cache
             else "persistent compile cache off")
    print(f"first step {step_times[0]:.2f} s (includes compilation; {where}); steady step median "
          f"{steady[len(steady) // 2] * 1e3:.1f} ms")
    steady_steps = max(1, args.steps - 3)
    print(f"per steady step: {(lx.metrics.counter_value('TracedOps') or 0) / steady_steps:.0f} traced ops, "
          f"{(lx.metrics.counter_value('UncachedCompile') or 0) / steady_steps:.2f} compiles, "
          f"{((lx.metrics.counter_value('CachedCompile') or 0) + (lx.metrics.counter_value('UncachedCompile') or 0)) / steady_steps:.2f} graphs")
    print("\nmetrics (steady state, lx.metrics.short_report()):")
    print(lx.metrics.short_report())
    report = lx.debug.donation_report()
    if report is not None:
        print("donation (last step graph):")
        lines = str(report).splitlines()
        print("\n".join(lines[:2]))
        kept = [ln for ln in lines[2:] if "kept:" in ln]
        print(f"  {report.donors} donated parameter buffers (weights and optimizer state), "
              f"{len(kept)} kept; first kept:")
        print("\n".join(kept[:3]))

    print("\nmemory (lx.debug.memory_report()):")
    print(lx.debug.memory_report(top=8))


if __name__ == "__main__":
    main()
