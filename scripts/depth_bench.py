"""Compile time against depth (issue #22): the reference GPT (lazyxla/workloads.py)
at several depths, its blocks run as a Python loop, with
`lx.experimental.scan_layers` or as `lx.experimental.ScannedLayers`, beside eager and,
optionally, PyTorch/XLA.

    python scripts/depth_bench.py [--layers 4,16,32] [--steps 6] [--repeats 1]
        [--systems eager,lazyxla,...] [--torch-xla-python /opt/txla/bin/python]

Each cell runs in its own process with the persistent compile cache off (cold first
steps). With `--repeats N` every cell runs N times, the rounds interleaved (all cells
once, then all again) so that a slow minute of a shared machine falls on every cell
alike; each column is then the median over the rounds. Reported per cell: the first
step (trace + compile + run), the median of the later steps, the median host time
before the step barrier (tracing), the XLA compile time within the first step
(CompileTime metric of lazyxla and PyTorch/XLA), and the peak device memory lazyxla's
ledger saw (`torch.lazyxla.max_memory_allocated`).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "..", "lazyxla", "workloads.py")
SYSTEMS = ("eager", "lazyxla", "lazyxla-scan", "lazyxla-stacked", "torch_xla")


def _workloads():
    """workloads.py by file path, so the eager and PyTorch/XLA cells never import lazyxla."""
    spec = importlib.util.spec_from_file_location("workloads", WORKLOADS)
    module = importlib.util.module_from_spec(spec)
    sys.modules["workloads"] = module   # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def run_cell(system: str, layers: int, steps: int) -> dict:
    import torch
    compile_ns = lambda: None   # noqa: E731  (eager compiles nothing)
    if system.startswith("lazyxla"):
        import lazyxla as lx
        from lazyxla import workloads
        device, barrier = lx.device(), lx.sync
        compile_ns = lambda: (lx.metrics.metric_data("CompileTime") or (0, 0))[1]   # noqa: E731
    else:
        workloads = _workloads()
        if system == "torch_xla":
            import torch_xla
            import torch_xla.debug.metrics as met
            device, barrier = torch_xla.device(), torch_xla.sync
            compile_ns = lambda: (met.metric_data("CompileTime") or (0, 0))[1]   # noqa: E731
        else:
            device, barrier = torch.device("cpu"), (lambda: None)
    cfg = workloads.GPTConfig(layers=layers, scan=system == "lazyxla-scan", stacked=system == "lazyxla-stacked")
    wl = workloads.make("gpt")
    torch.manual_seed(0)
    model = workloads.gpt(cfg).to(device)
    opt = wl.optimizer(model.parameters())
    inputs, targets = wl.inputs.to(device), wl.targets.to(device)
    barrier()
    times, tracing, losses, compiled = [], [], [], []
    for _ in range(steps):
        before = compile_ns()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = wl.loss(model, inputs, targets)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        barrier()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        tracing.append(t1 - t0)
        compiled.append(None if before is None else (compile_ns() - before) / 1e9)
    out = {"system": system, "layers": layers, "first_s": times[0], "step_ms": 1e3 * statistics.median(times[1:]),
           "tracing_ms": 1e3 * statistics.median(tracing[1:]), "loss": losses[-1], "compile_s": compiled[0]}
    if system.startswith("lazyxla"):
        out["peak_mb"] = torch.lazyxla.max_memory_allocated() / 2**20
    return out


def _child(python: str, system: str, layers: int, steps: int) -> dict:
    env = dict(os.environ, LAZYXLA_CACHE_DIR="", PJRT_DEVICE="CPU")
    run = subprocess.run([python, os.path.abspath(__file__), "--cell", system, str(layers), "--steps", str(steps)],
                         capture_output=True, text=True, env=env)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode or not lines:
        return {"system": system, "layers": layers, "error": (run.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def _median_row(results: list) -> dict:
    """One cell's runs as one row: the median of each measured column (the first
    failure, if a run failed)."""
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    row = dict(results[0])
    for column, value in row.items():
        if isinstance(value, float):
            row[column] = statistics.median(r[column] for r in results)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", nargs=2, metavar=("SYSTEM", "LAYERS"))
    p.add_argument("--layers", default="4,16,32")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=1, help="runs of each cell (median reported)")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--torch-xla-python")
    args = p.parse_args(argv)
    if args.cell:
        print(json.dumps(run_cell(args.cell[0], int(args.cell[1]), args.steps)))
        return 0
    cells = [(layers, system) for layers in map(int, args.layers.split(","))
             for system in args.systems.split(",") if system != "torch_xla" or args.torch_xla_python]
    runs: dict = {cell: [] for cell in cells}
    for _ in range(args.repeats):
        for layers, system in cells:
            python = args.torch_xla_python if system == "torch_xla" else sys.executable
            runs[layers, system].append(_child(python, system, layers, args.steps))
            print(json.dumps(runs[layers, system][-1]), file=sys.stderr, flush=True)
    rows = [_median_row(runs[cell]) for cell in cells]
    print("| layers | system | first step (s) | its compile (s) | step (ms) | tracing (ms) | peak device MB | loss |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['layers']} | {r['system']} | failed: {r['error'][:80]} | | | | | |")
            continue
        peak = f"{r['peak_mb']:.0f}" if "peak_mb" in r else "-"
        compiled = f"{r['compile_s']:.2f}" if r.get("compile_s") is not None else "-"
        print(f"| {r['layers']} | {r['system']} | {r['first_s']:.2f} | {compiled} | {r['step_ms']:.0f} | {r['tracing_ms']:.1f} "
              f"| {peak} | {r['loss']:.4f} |")
    depths = sorted({r["layers"] for r in rows})
    first = {(r["layers"], r["system"]): r["first_s"] for r in rows if "error" not in r}
    if len(depths) > 1:
        print(f"\nfirst step, {depths[-1]} layers / {depths[0]}:")
        for system in dict.fromkeys(r["system"] for r in rows):
            if (depths[0], system) in first and (depths[-1], system) in first:
                print(f"- {system}: {first[depths[-1], system] / first[depths[0], system]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
