"""`python -m lazyxla.bench`: run the benchmark suite (docs/benchmarks.md)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

from .plan import (AMP_DTYPES, AMP_SYSTEMS, DEFAULT_WORKLOADS, FULL, GPT_SIZES, LONG_WORKLOADS, MATMUL_PRECISIONS,
                   QUICK, SYSTEMS, WORKLOADS, cells)


def _csv(value: str, allowed: tuple) -> tuple:
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [v for v in items if v not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {', '.join(allowed)}")
    return items


def _depths(value: str) -> tuple:
    try:
        layers = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of layer counts: {value!r}") from None
    if not layers or min(layers) < 1:
        raise argparse.ArgumentTypeError(f"layer counts must be positive: {value!r}")
    return layers


def _git_commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def _load() -> str:
    """1/5/15-minute load averages: other work on the machine skews timings."""
    try:
        return "/".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return ""


def _default_jobs(quick: bool) -> int:
    """Cells at once when --jobs is not given: 2 in quick mode on CPU, else 1. An
    accelerator admits one process at a time (a second one cannot open a TPU), so the
    platform is asked in a child of its own, unless JAX_PLATFORMS already says cpu."""
    if not quick:
        return 1
    if os.environ.get("JAX_PLATFORMS", "").split(",")[0] == "cpu":
        return 2
    try:
        probe = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return 1
    return 2 if probe.stdout.strip() == "cpu" else 1


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lazyxla.bench", description=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="CI mode: 2 warm-up + 3 steps, small GPT, W3 64 MB, W4 200 ops")
    ap.add_argument("--workloads", type=lambda v: _csv(v, WORKLOADS), default=DEFAULT_WORKLOADS,
                    help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all but "
                         f"{','.join(LONG_WORKLOADS)}, which runs only when named)")
    ap.add_argument("--systems", type=lambda v: _csv(v, SYSTEMS), default=SYSTEMS,
                    help=f"comma-separated subset of {','.join(SYSTEMS)} (torch_xla needs --torch-xla-python)")
    ap.add_argument("--torch-xla-python", metavar="PYTHON",
                    help="interpreter of an environment with torch_xla (run with PJRT_DEVICE=CPU)")
    ap.add_argument("--out", default="bench_out", help="output folder (default bench_out/)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="cells run at once (default 1; 2 in --quick mode). Timings need 1.")
    ap.add_argument("--steps", type=int, help="override the number of measured steps")
    ap.add_argument("--warmup", type=int, help="override the number of warm-up steps")
    ap.add_argument("--timeout", type=int, help="seconds per cell before it is recorded as failed")
    ap.add_argument("--amp", choices=AMP_DTYPES,
                    help=f"also train mlp/gpt on {', '.join(AMP_SYSTEMS)} in this dtype's mixed precision: "
                         "torch.autocast, and the JAX limit written to autocast's op lists (own rows, variant "
                         "amp-DTYPE)")
    ap.add_argument("--gpt-size", choices=GPT_SIZES,
                    help="W2's (and W5's) model and batch: proxy (d 64, 4 layers, seq 32, batch 2: the CPU proxy of a "
                         "TPU step), reference (d 256, 4 layers, seq 128, batch 8), gpt2 (GPT-2 small: d 768, "
                         "12 layers, 12 heads, seq 512, batch 8, vocab 50304); default reference (quick in --quick)")
    ap.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                    help="float32 matrix products on lazyxla and the JAX limit alike (default highest, lazyxla's; "
                         "default = the platform's fastest, one bf16 pass on a TPU)")
    ap.add_argument("--spmd", action="store_true",
                    help="also train W2 in SPMD mode on 8 forced host devices, data parallel and FSDP, on lazyxla "
                         "and a hand-written JAX jit with the same shardings (variants spmd-dp, spmd-fsdp)")
    ap.add_argument("--layers", type=_depths, default=(),
                    help="W2 at each of these depths (comma-separated, e.g. 4,16,32) instead of its own, and on "
                         "lazyxla also with scan_layers and ScannedLayers (variants layers-N, layers-N-scan, "
                         "layers-N-stacked); a Depth table")
    ap.add_argument("--phases", action="store_true",
                    help="also record lazyxla's first step and a pipelined block on lx.debug.host_timeline: "
                         "a table of host ms per step by stage (trace, collect, plan, compile, dispatch, ...)")
    ap.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.gpt_size:
        settings = settings.with_gpt_size(args.gpt_size)
    overrides = {k: v for k, v in (("steps", args.steps), ("warmup", args.warmup), ("hf_steps", args.steps),
                                   ("hf_warmup", args.warmup), ("timeout_s", args.timeout),
                                   ("matmul_precision", args.matmul_precision), ("phases", args.phases or None))
                 if v is not None}
    settings = type(settings).from_dict({**settings.to_dict(), **overrides})
    systems = args.systems
    skipped = []
    if "torch_xla" in systems and not args.torch_xla_python:
        systems = tuple(s for s in systems if s != "torch_xla")
        skipped.append("torch_xla (no --torch-xla-python)")
    todo = cells(args.workloads, systems, amp=args.amp, spmd=args.spmd, layers=args.layers)
    if not todo:
        print("nothing to run", file=sys.stderr)
        return 2
    jobs = args.jobs or _default_jobs(args.quick)

    # deferred: argument errors and --help answer before the runner's modules load
    from .orchestrate import run_all
    from .report import checks, render
    from .chart import chart_or_note

    os.makedirs(args.out, exist_ok=True)
    meta = {"mode": settings.mode, "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "commit": _git_commit(), "host": platform.node(), "cpus": len(os.sched_getaffinity(0)),
            "python": sys.version.split()[0], "warmup": settings.warmup, "steps": settings.steps,
            "jobs": jobs, "gpt size": settings.gpt_size, "matmul precision": settings.matmul_precision,
            "amp": args.amp, "spmd": args.spmd, "layers": ",".join(map(str, args.layers)), "skipped": ", ".join(skipped), "load before": _load()}
    records = run_all(todo, settings, args.out, args.torch_xla_python, jobs=jobs, progress=not args.no_progress)
    meta["load after"] = _load()
    text = render(records, meta)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump({**meta, "settings": settings.to_dict()}, f, indent=1)
    chart, note = chart_or_note(records, args.out, f"lazyxla benchmark ({settings.mode})")
    print(text)
    print(f"\nwrote {os.path.join(args.out, 'results.jsonl')}, {os.path.join(args.out, 'results.md')}"
          + (f", {chart}" if chart else ""))
    if note:
        print(note)
    for problem in checks(records):
        print(f"warning: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
