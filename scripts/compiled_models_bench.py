"""Compiled Hugging Face models: eager, lazyxla's lazy mode, lazyxla compiled and
PyTorch/XLA's `openxla` backend, side by side (issues #22, #23).

    python scripts/compiled_models_bench.py [--models gpt2,llama,t5,bert,vit]
        [--steps 8] [--torch-xla-python /opt/txla/bin/python]

Each (system, model) cell runs in its own process (`--cell SYSTEM MODEL`, which
prints one JSON line), so compile caches and imports are its own. A cell trains
the random-init model of lazyxla/bench/hf_models.py with AdamW (`gpt2_small`:
GPT-2 small's real size, batch 2 x 128; the others tiny); in the
compiled systems both the model and `opt.step` are compiled. Reported: the first
step (trace + compile + run), the median steady step, and the median host time
spent before the step barrier (tracing, or dynamo's guards and replay). The
persistent compile cache is off so first steps are cold.
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
HF_MODELS = os.path.join(HERE, "..", "lazyxla", "bench", "hf_models.py")
ATTN = {"gpt2": "eager", "llama": "sdpa", "t5": "eager", "bert": "sdpa", "vit": "sdpa", "gpt2_small": "sdpa"}
DEFAULT_MODELS = ("gpt2", "llama", "t5", "bert", "vit")
SYSTEMS = ("eager", "lazy", "compiled", "openxla")


def _hf_models():
    """hf_models by file path: the openxla cell must not import lazyxla."""
    spec = importlib.util.spec_from_file_location("hf_models", HF_MODELS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runtime(system: str):
    """(device, barrier, compile) for a system."""
    import torch
    if system == "eager":
        return torch.device("cpu"), (lambda: None), (lambda f: f)
    if system == "openxla":
        import torch_xla
        return torch_xla.device(), torch_xla.sync, lambda f: torch.compile(f, backend="openxla")
    import lazyxla as lx
    compile_ = (lambda f: torch.compile(f, backend="lazyxla")) if system == "compiled" else (lambda f: f)
    return lx.device(), lx.sync, compile_


def run_cell(system: str, arch: str, steps: int) -> dict:
    import torch
    hf = _hf_models()
    device, barrier, compile_ = _runtime(system)
    model = hf.build(arch, ATTN[arch]).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-3, weight_decay=0.01)
    kw = {k: v.to(device) for k, v in hf.batch(arch, padded=False).items()}
    forward, step = compile_(model), compile_(opt.step)
    barrier()
    times, tracing, losses = [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = forward(**kw).loss
        loss.backward()
        step()
        t1 = time.perf_counter()
        barrier()
        losses.append(loss.item())
        t2 = time.perf_counter()
        times.append(t2 - t0)
        tracing.append(t1 - t0)
    return {"system": system, "model": arch, "first_s": times[0],
            "step_ms": 1e3 * statistics.median(times[2:]), "tracing_ms": 1e3 * statistics.median(tracing[2:]),
            "losses": losses}


def _run_child(python: str, system: str, arch: str, steps: int) -> dict:
    env = dict(os.environ, LAZYXLA_CACHE_DIR="", PJRT_DEVICE="CPU")
    out = subprocess.run([python, os.path.abspath(__file__), "--cell", system, arch, "--steps", str(steps)],
                         capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"system": system, "model": arch, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def _table(rows: list) -> str:
    out = ["| model | system | first step (s) | step (ms) | before barrier (ms) | loss after last step |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['system']} | failed: {r['error'][:80]} | | | |")
        else:
            out.append(f"| {r['model']} | {r['system']} | {r['first_s']:.2f} | {r['step_ms']:.1f} | "
                       f"{r['tracing_ms']:.1f} | {r['losses'][-1]:.5f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cell", nargs=2, metavar=("SYSTEM", "MODEL"))
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"any of {','.join(ATTN)}")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--torch-xla-python", default=None)
    args = p.parse_args(argv)
    if args.cell:
        print(json.dumps(run_cell(*args.cell, args.steps)))
        return 0
    rows = []
    for arch in args.models.split(","):
        for system in SYSTEMS:
            if system == "openxla" and not args.torch_xla_python:
                continue
            python = args.torch_xla_python if system == "openxla" else sys.executable
            rows.append(_run_child(python, system, arch, args.steps))
            print(json.dumps(rows[-1]), file=sys.stderr)
    if not args.torch_xla_python:
        print("(openxla skipped: pass --torch-xla-python)")
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
