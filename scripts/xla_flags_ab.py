"""A/B of XLA_FLAGS settings on the W2 (gpt) lazy training step, in fresh processes.

    python scripts/xla_flags_ab.py [--rounds R] [--steps N] [--workload gpt|mlp] "FLAGS A" "FLAGS B" ...

Each round runs every setting once, in turn (interleaved, so a change in the
machine's load hits all settings alike); each run is a fresh process (XLA reads
XLA_FLAGS once) that trains N steady steps after 3 warm-up steps and reports the
median step time (device work waited for) and the final loss. Prints, per setting,
the median over rounds and every round's value; the losses must agree, or the
setting changed the numerics (reported). "" is the default configuration.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import lazyxla as lx
from lazyxla import workloads
name, steps = sys.argv[1], int(sys.argv[2])
wl = workloads.make(name)
dev = lx.device()
model = wl.model.to(dev)
x, y = wl.inputs.to(dev), wl.targets.to(dev)
opt = wl.optimizer(model.parameters(), foreach=True)
times = []
for i in range(steps + 3):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = wl.loss(model, x, y)
    loss.backward()
    opt.step()
    lx.sync()
    lx.wait_device_ops()
    times.append(time.perf_counter() - t0)
print(json.dumps({"ms": statistics.median(times[3:]) * 1e3, "loss": float(loss.cpu())}))
"""


def run_once(flags: str, workload: str, steps: int) -> dict:
    env = {**os.environ, "XLA_FLAGS": flags}
    proc = subprocess.run([sys.executable, "-c", CHILD, workload, str(steps)], env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"XLA_FLAGS={flags!r} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--workload", default="gpt")
    ap.add_argument("settings", nargs="+")
    a = ap.parse_args()
    results: dict = {s: [] for s in a.settings}
    for _ in range(a.rounds):
        for s in a.settings:
            results[s].append(run_once(s, a.workload, a.steps))
    base_loss = results[a.settings[0]][0]["loss"]
    for s, runs in results.items():
        ms = [r["ms"] for r in runs]
        losses = {r["loss"] for r in runs}
        same = all(abs(v - base_loss) <= 1e-5 * abs(base_loss) for v in losses)
        print(f"{s or '(default)':<70} median {statistics.median(ms):7.1f} ms  "
              f"[{', '.join(f'{m:.0f}' for m in ms)}]  loss {'same' if same else sorted(losses)}")


if __name__ == "__main__":
    main()
