"""`python -m lazyxla.bench.soak`: a long training run, checked for creep.

Trains a reference workload (lazyxla/workloads.py; the GPT by default) for `--steps`
steps with a step barrier each, and samples every `--every` steps: the process's
resident memory (RSS), lazyxla's device-memory ledger (bytes and live buffers,
`torch.lazyxla.memory_stats()`), JAX's live arrays, and the executables compiled or
loaded so far. After warm-up (`--warmup` steps) the counts must not move at all, and the
report gives the RSS slope (bytes per step, least squares over the samples after warm-up).

    python -m lazyxla.bench.soak --steps 2000 --json soak.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Optional

import jax
import torch

import lazyxla as lx
from lazyxla.workloads import make

COUNTS = ("ledger_bytes", "live_buffers", "jax_live_arrays", "executables")


def rss_bytes() -> int:
    """Resident memory of this process now (Linux: /proc/self/statm; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        # optional: only where /proc is missing (resource is POSIX-only)
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sample(step: int, loss: float) -> dict:
    stats = torch.lazyxla.memory_stats()
    built = sum(lx.metrics.counter_value(n) or 0 for n in ("UncachedCompile", "PersistentCacheHit"))
    return {"step": step, "loss": loss, "rss": rss_bytes(), "ledger_bytes": stats["allocated_bytes.all.current"],
            "live_buffers": stats["active.all.current"], "jax_live_arrays": len(jax.live_arrays()),
            "executables": built}


def slope(xs: list, ys: list) -> float:
    """Least-squares slope of ys over xs (0 for fewer than two points)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


@dataclasses.dataclass
class Report:
    workload: str
    steps: int
    warmup: int
    seconds: float
    samples: list
    rss_slope: float            # bytes per step after warm-up
    moved: dict                 # count -> (value after warm-up, last value), for counts that moved

    @property
    def flat(self) -> bool:
        return not self.moved

    def text(self) -> str:
        after = [s for s in self.samples if s["step"] >= self.warmup]
        first, last = after[0], after[-1]
        lines = [f"{self.workload}: {self.steps} steps in {self.seconds:.1f} s "
                 f"({1000 * self.seconds / self.steps:.1f} ms/step); after warm-up ({self.warmup} steps):",
                 f"  RSS {first['rss'] / 2**20:.1f} -> {last['rss'] / 2**20:.1f} MiB, slope "
                 f"{self.rss_slope:+.1f} bytes/step ({self.rss_slope * 1000 / 2**20:+.2f} MiB per 1,000 steps)"]
        for name in COUNTS:
            lines.append(f"  {name}: {first[name]} -> {last[name]}" + ("  MOVED" if name in self.moved else ""))
        return "\n".join(lines)


def run(steps: int = 2000, workload: str = "gpt", every: int = 50, warmup: int = 20,
        on_sample=None) -> Report:
    """Train `workload` for `steps` steps on `lx.device()`, sampling after `warmup` and every
    `every` steps (and after the last); `on_sample(dict)` sees each sample as it is taken."""
    dev = lx.device()
    w = make(workload)
    model = w.model.to(dev)
    opt = w.optimizer(model.parameters())
    x, y = w.inputs.to(dev), w.targets.to(dev)
    samples = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        loss = w.loss(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lx.sync()
        if step == warmup or (step > warmup and step % every == 0) or step == steps:
            samples.append(sample(step, loss.item()))
            if on_sample is not None:
                on_sample(samples[-1])
    seconds = time.perf_counter() - start
    after = [s for s in samples if s["step"] >= warmup]
    moved = {n: (after[0][n], after[-1][n]) for n in COUNTS if any(s[n] != after[0][n] for s in after)}
    rss = slope([s["step"] for s in after], [s["rss"] for s in after])
    return Report(workload, steps, warmup, seconds, samples, rss, moved)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--workload", default="gpt", choices=("gpt", "mlp", "convnet"))
    ap.add_argument("--every", type=int, default=50, help="sample every N steps")
    ap.add_argument("--warmup", type=int, default=20, help="steps before the counts must hold still")
    ap.add_argument("--json", help="write the report and every sample here")
    args = ap.parse_args(argv)
    report = run(args.steps, args.workload, args.every, args.warmup,
                 on_sample=lambda s: print(json.dumps(s), file=sys.stderr, flush=True))
    print(report.text())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dataclasses.asdict(report), f, indent=1)
    return 0 if report.flat else 1


if __name__ == "__main__":
    sys.exit(main())
