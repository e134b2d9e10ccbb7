"""Where a training step's time goes inside XLA:CPU, thunk by thunk.

    python scripts/xla_thunk_profile.py [--layers 4] [--stacked] [--save-activations]
        [--warmup 3] [--top 25]

Trains the reference GPT (lazyxla/workloads.py) on the lazyxla device for `--warmup`
steps, then runs one more under `jax.profiler` with XLA:CPU's per-thunk trace
(`--xla_cpu_enable_xprof_traceme`) and prints:
- the step's wall time and the sum of its thunks' times (summed over XLA's threads,
  so the sum can exceed the wall time when thunks run side by side);
- the time per thunk kind: the thunk's name without its number. `ynn_fusion` is a
  YNNPACK matrix product with the elementwise work fused into it, `dot_general` a
  product XLA runs itself (batched ones), `*dynamic-slice*` / `*dynamic-update-slice*`
  a loop reading / writing one iteration of its stacked operands, `wrapped_broadcast`
  a fill (a loop's zero-initialised outputs among them);
- the thunks that ran once per layer (the scanned loops' bodies, with `--stacked`)
  against the rest;
- the `--top` thunks by time.
Control-flow thunks (a loop's `while`) are left out: their spans may hold their bodies.

This is how docs/benchmarks.md ("Depth") found that 75% of the 32-layer step is in
matrix products. XLA_FLAGS set by the caller are kept.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

_THUNK_TRACE = "--xla_cpu_enable_xprof_traceme=true"
# trace events that are not thunks (the executor's own spans, Python frames, waits)
_NOT_THUNKS = ("ThunkExecutor::", "SlinkyThreadPool::", "Wait for usage holds", "PjitFunction(", "$")
# control-flow thunks: their spans can hold their bodies' thunks, which are counted already
_CONTROL_FLOW = ("while", "conditional", "call")


def _thunk_times(trace_dir: str) -> tuple[collections.Counter, collections.Counter]:
    """Microseconds and runs per thunk name in the Perfetto trace under `trace_dir`."""
    path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True))[-1]
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    time_us, runs = collections.Counter(), collections.Counter()
    for e in events:
        name = e.get("name", "")
        if (e.get("ph") == "X" and not name.startswith(_NOT_THUNKS + ("end: ",))
                and re.sub(r"\.\d+$", "", name) not in _CONTROL_FLOW):
            time_us[name] += e["dur"]
            runs[name] += 1
    return time_us, runs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--stacked", action="store_true", help="blocks as lx.experimental.ScannedLayers")
    p.add_argument("--save-activations", action="store_true", help="ScannedLayers(rematerialize=False)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    if _THUNK_TRACE not in os.environ.get("XLA_FLAGS", ""):   # read when XLA's CPU client starts
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _THUNK_TRACE).strip()
    import jax
    import torch

    import lazyxla as lx
    from lazyxla import workloads

    dev = lx.device()
    wl = workloads.make("gpt")
    torch.manual_seed(0)
    model = workloads.gpt(workloads.GPTConfig(layers=args.layers, stacked=args.stacked))
    if args.save_activations:
        if not args.stacked:
            p.error("--save-activations needs --stacked")
        model.blocks.rematerialize = False
    model = model.to(dev)
    opt = wl.optimizer(model.parameters())
    inputs, targets = wl.inputs.to(dev), wl.targets.to(dev)

    def step() -> float:
        opt.zero_grad()
        loss = wl.loss(model, inputs, targets)
        loss.backward()
        opt.step()
        lx.sync()
        return loss.item()

    for _ in range(args.warmup):
        step()
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
        jax.profiler.stop_trace()
        time_us, runs = _thunk_times(trace_dir)

    kinds, kind_names = collections.Counter(), collections.Counter()
    for name, us in time_us.items():
        kinds[re.sub(r"\.\d+$", "", name)] += us
        kind_names[re.sub(r"\.\d+$", "", name)] += 1
    total = sum(time_us.values())
    per_layer = sum(us for name, us in time_us.items() if runs[name] == args.layers)
    print(f"GPT, {args.layers} layers{', stacked' if args.stacked else ''}"
          f"{', saving activations' if args.save_activations else ''}: step {1e3 * wall:.1f} ms wall, "
          f"thunks {total / 1e3:.1f} ms summed over threads")
    if args.stacked:
        print(f"  thunks run once per layer (the loops): {per_layer / 1e3:.1f} ms, "
              f"{per_layer / 1e3 / args.layers:.1f} ms a layer; the rest {(total - per_layer) / 1e3:.1f} ms")
    print("\n| thunk kind | ms | share | thunks |\n|---|---|---|---|")
    for kind, us in kinds.most_common():
        if us >= 0.001 * total:
            print(f"| {kind} | {us / 1e3:.2f} | {100 * us / total:.1f}% | {kind_names[kind]} |")
    print(f"\n| top thunk | ms | runs |\n|---|---|---|")
    for name, us in time_us.most_common(args.top):
        print(f"| {name} | {us / 1e3:.2f} | {runs[name]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
