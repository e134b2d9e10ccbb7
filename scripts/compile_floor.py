"""What torch.compile itself costs on a workload, next to lazyxla's two modes.

    python scripts/compile_floor.py [gpt|mlp|gpt2-124m] [--steps N] [--modes lazy,aot_eager,lazyxla]

Runs one training step loop per mode in this process, one after the other:
lazy mode, `torch.compile(backend="aot_eager")` on CPU tensors (dynamo +
AOTAutograd with a backend that adds nothing: torch's own first-step tracing
cost) and `torch.compile(backend="lazyxla")`. Prints each mode's first step
and median steady step. Issue #9 asks the compiled first step to be no slower
than lazy mode's; the aot_eager row is the floor no backend can go below.
"""
from __future__ import annotations

import statistics
import sys
import time

import torch

import lazyxla as lx
from lazyxla import workloads
from lazyxla.bench.hf_models import HFWorkload


def run(name: str, mode: str, steps: int) -> tuple[float, float]:
    wl = HFWorkload(name, "gpt2_small", "sdpa") if name == "gpt2-124m" else workloads.make(name)
    on_cpu = mode == "aot_eager"
    dev = torch.device("cpu") if on_cpu else lx.device()
    model = wl.model.to(dev)
    x, y = wl.inputs.to(dev), wl.targets.to(dev)
    opt = wl.optimizer(model.parameters())
    model_fn, loss_fn, step_fn = model, wl.loss, opt.step
    if mode != "lazy":
        model_fn, loss_fn, step_fn = (torch.compile(f, backend=mode) for f in (model, wl.loss, opt.step))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(model_fn, x, y).backward()
        step_fn()
        if not on_cpu:
            lx.sync()
            lx.wait_device_ops()
        times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times[3:])


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "gpt"
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 10
    modes = sys.argv[sys.argv.index("--modes") + 1].split(",") if "--modes" in sys.argv else \
        ("lazy", "aot_eager", "lazyxla")
    for mode in modes:
        first, steady = run(name, mode, steps)
        print(f"{name} {mode:9s} first step {first:6.2f} s   steady step {steady * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
