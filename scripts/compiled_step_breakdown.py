"""Where a compiled W2 step's Python time goes (median ms per step, no profiler).

    python scripts/compiled_step_breakdown.py [gpt|mlp] [--steps N] [--lazy]

Wraps lazyxla's per-call functions with timers (a few µs per wrapped call of
overhead) and reports, per steady step: the whole step until `lx.sync()` returns,
the part before sync (dynamo + AOTAutograd + lazyxla's replay), lazyxla's replay
(`CompiledGraph._call`: signature, operands, CALL insertion, output tensors,
write-backs) and its CALL insertion alone, then sync's collect / plan /
compile-cache lookup / execute. The device work of the previous step is waited
for before each step, so it does not share the cores.
"""
from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict

import lazyxla as lx
from compiled_step_profile import make_step   # this folder is on sys.path when run as a script
from lazyxla.dynamo import replay
from lazyxla.capture import function as capture
from lazyxla.sync import pipeline as api   # where the stages' callees are named

acc: dict = defaultdict(float)


def timed(owner, attr: str, label: str) -> None:
    fn = getattr(owner, attr)

    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t0
    setattr(owner, attr, wrapper)


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "gpt"
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 30
    compiled = "--lazy" not in sys.argv
    timed(replay.CompiledGraph, "_call", "replay (lazyxla)")
    timed(capture.Capture, "insert", "  of which CALL insertion + outputs")
    timed(api, "collect", "sync: collect")
    timed(api, "plan_donors", "sync: donation plan")
    timed(api, "get_or_compile", "sync: cache lookup")
    timed(api, "execute", "sync: execute (dispatch)")
    step = make_step(name, compiled)
    rows = defaultdict(list)
    for i in range(steps + 3):
        lx.wait_device_ops()
        acc.clear()
        t0 = time.perf_counter()
        loss = step()
        t1 = time.perf_counter()
        lx.sync()
        t2 = time.perf_counter()
        if i >= 3:
            rows["step until sync returns"].append(t2 - t0)
            rows["before sync (torch + lazyxla)"].append(t1 - t0)
            rows["sync"].append(t2 - t1)
            for k, v in acc.items():
                rows[k].append(v)
    lx.wait_device_ops()
    print(f"{name} {'compiled' if compiled else 'lazy'}: median ms per step over {steps} steps, "
          f"loss {float(loss.detach().cpu()):.6f}")
    for k, v in rows.items():
        print(f"  {k:38s} {statistics.median(v) * 1e3:7.2f}")


if __name__ == "__main__":
    main()
