"""Parent side: run every cell in its own subprocess, one after the other (or
`jobs` at a time in quick mode), and collect the records."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from .plan import SPMD_DEVICES, TRAINING, Cell, Settings
from .export import export_trace_input, export_workload

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")


def prepare(cells: list[Cell], settings: Settings, out_dir: str) -> list[Cell]:
    """Export what the JAX limit needs (weights, batches, W4 input) into `out_dir/inputs`."""
    inputs = os.path.join(out_dir, "inputs")
    exported: dict[str, str] = {}
    out = []
    for c in cells:
        extra = dict(c.extra)
        if c.system == "jax" and c.workload in TRAINING:
            name = c.workload + (f"-{c.variant}" if c.depth else "")   # a --layers cell: its own model
            if name not in exported:
                exported[name] = export_workload(c.workload, c.settings(settings), inputs, name)
            extra["npz"] = exported[name]
        if c.system == "jax" and c.workload == "trace":
            extra["trace_input"] = export_trace_input(settings.trace_shape, inputs)
        out.append(Cell(c.workload, c.system, c.variant, extra))
    return out


def _error_record(cell: Cell, settings: Settings, error: str, log: str) -> dict:
    rec = {**cell.to_dict(), "mode": settings.mode, "ok": False, "error": error, "log": log}
    for path_key in ("npz", "trace_input"):
        rec.pop(path_key, None)
    return rec


def run_cell(cell: Cell, settings: Settings, out_dir: str, torch_xla_python: str | None) -> dict:
    """Run one cell in a fresh interpreter; any failure becomes an error record."""
    python = torch_xla_python if cell.system == "torch_xla" else sys.executable
    env = dict(os.environ)
    env["LAZYXLA_CACHE_DIR"] = ""   # no persistent compile cache: cold first steps stay cold
    if cell.system == "torch_xla":
        env.setdefault("PJRT_DEVICE", "CPU")
    if cell.spmd:   # the device count is fixed when JAX starts
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={SPMD_DEVICES}"
    safe = cell.label.replace("/", "__").replace("[", "_").replace("]", "")
    out = os.path.join(out_dir, "cells", safe + ".json")
    log = os.path.join(out_dir, "logs", safe + ".log")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    cmd = [python, CHILD, "--cell", json.dumps(cell.to_dict()), "--settings", json.dumps(settings.to_dict()),
           "--out", out]
    start = time.perf_counter()
    try:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=settings.timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        return _error_record(cell, settings, f"timed out after {settings.timeout_s} s", log)
    except OSError as exc:
        return _error_record(cell, settings, f"could not start {python}: {exc}", log)
    if not os.path.exists(out):
        with open(log) as f:
            tail = f.read()[-1500:]
        return _error_record(cell, settings, f"child exited with status {rc} without a result: ...{tail}", log)
    with open(out) as f:
        rec = json.load(f)
    rec["process_s"] = round(time.perf_counter() - start, 3)
    rec["log"] = log
    return rec


def run_all(cells: list[Cell], settings: Settings, out_dir: str, torch_xla_python: str | None = None,
            jobs: int = 1, progress: bool = True) -> list[dict]:
    """Records of all cells, in the order of `cells`; also appended to
    `out_dir/results.jsonl` as they finish (then rewritten in order)."""
    os.makedirs(out_dir, exist_ok=True)
    jsonl = os.path.join(out_dir, "results.jsonl")
    open(jsonl, "w").close()
    cells = prepare(cells, settings, out_dir)
    records: list[dict | None] = [None] * len(cells)
    bar = tqdm(total=len(cells), desc="bench", unit="cell", disable=not progress, file=sys.stderr)

    def one(i: int) -> None:
        bar.set_postfix_str(cells[i].label)
        rec = run_cell(cells[i], settings, out_dir, torch_xla_python)
        records[i] = rec
        with open(jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")
        bar.update(1)
        if not rec.get("ok"):
            tqdm.write(f"{cells[i].label}: FAILED: {str(rec.get('error'))[:300]}", file=sys.stderr)

    if jobs <= 1:
        for i in range(len(cells)):
            one(i)
    else:
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, range(len(cells))))
    bar.close()
    with open(jsonl, "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return records
