"""Start a multi-process example's workers on localhost and collect what each reports, and
the training loop the examples' workers and their eager references run.

Each worker is `python -m <module> <args> --process-id i` with its own count of forced
host devices, and prints one line `<tag><json>`; every wait is bounded by `timeout`.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from typing import Callable


def main(ap: argparse.ArgumentParser, argv, worker, launch) -> int:
    """Parse `argv` with the arguments every example takes added to `ap`; run as a
    worker when started with --process-id (by `run_workers`), else launch the run."""
    ap.add_argument("--timeout", type=int, default=300, help="seconds any wait may take")
    ap.add_argument("--check", action="store_true", help="compare with one eager CPU run")
    ap.add_argument("--coordinator", help="HOST:PORT of process 0; with --process-id, run one process of a "
                    "run over several machines (docs/spmd.md, 'Many machines')")
    ap.add_argument("--process-id", type=int, help="this process's index (0 on the coordinator's machine)")
    ap.add_argument("--heartbeat-timeout", type=int, default=100,
                    help="seconds without a heartbeat before a process is taken for lost (lx.distributed.initialize)")
    args = ap.parse_args(argv)
    if args.process_id is not None:
        worker(args)
        return 0
    return launch(args)


def train(opt, loss_of: Callable, steps: int, barrier: Callable = lambda: None) -> list:
    """`steps` training steps of `loss_of()` (forward, backward, `opt.step`, zero_grad, then
    `barrier`, lx.sync on a lazyxla device); the losses as Python floats."""
    losses = []
    for _ in range(steps):
        loss = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad()
        barrier()
        losses.append(loss.item())
    return losses


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(module: str, args: list[str], processes: int, devices: int, timeout: int, tag: str,
                label: str = "process") -> list[dict]:
    """Run `processes` workers of `module` on `devices` CPU devices each; their reports in
    process order. A worker that fails or outlives `timeout` ends the run (SystemExit,
    with its stderr's tail), the others killed."""
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    base = [sys.executable, "-m", module, *args]
    procs = [subprocess.Popen(base + ["--process-id", str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(processes)]
    results = []
    try:
        for i, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise SystemExit(f"{label} {i} timed out after {timeout} s") from None
            if p.returncode != 0:
                raise SystemExit(f"{label} {i} failed (exit {p.returncode}):\n{err[-3000:]}")
            line = next((ln for ln in out.splitlines() if ln.startswith(tag)), None)
            if line is None:
                raise SystemExit(f"{label} {i} exited without its report line ({tag.strip()})")
            results.append(json.loads(line[len(tag):]))
            print(f"{label} {i}: {results[-1]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results
