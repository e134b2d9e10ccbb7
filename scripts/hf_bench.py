"""Hugging Face Trainer steady step, side by side: eager CPU, lazyxla native
(`python -m lazyxla.run`) and through `python -m lazyxla.compat`, on the tiny GPT-2 of
tests/hf_scripts/trainer_gpt2.py. Prints a markdown table (docs/benchmarks.md).

    python scripts/hf_bench.py [STEPS]
"""
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

SCRIPTS = pathlib.Path(__file__).resolve().parent.parent / "tests" / "hf_scripts"
CPU_TIMER = """
import runpy, sys, time, json
from torch.optim.optimizer import register_optimizer_step_post_hook
stamps = []
register_optimizer_step_post_hook(lambda *a: stamps.append(time.perf_counter()))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("STEPS", json.dumps([{"s": b - a} for a, b in zip(stamps, stamps[1:])]))
"""


def run(args: list, cwd: str) -> list:
    out = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                         env={k: v for k, v in os.environ.items() if not k.startswith("LAZYXLA_")})
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    line = next(line for line in out.stdout.splitlines() if line.startswith("STEPS "))
    return json.loads(line[6:])


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    script = SCRIPTS / "trainer_gpt2.py"
    rows = []
    with tempfile.TemporaryDirectory() as cwd:
        for name, args in (("eager CPU", ["-c", CPU_TIMER, script, steps, 1, "--cpu"]),
                           ("lazyxla native", [SCRIPTS / "measure.py", "run", script, steps, 1]),
                           ("lazyxla compat", [SCRIPTS / "measure.py", "compat", script, steps, 1])):
            steady = run(args, cwd)[5:]
            graphs = {s["ExecuteComputation"] for s in steady} if "ExecuteComputation" in steady[0] else {"-"}
            compiles = sum(s.get("UncachedCompile", 0) for s in steady)
            rows.append((name, statistics.median(s["s"] for s in steady) * 1e3,
                         "/".join(map(str, sorted(graphs))), compiles))
    print("| run | steady step (ms, median) | graphs a step | compiles after step 6 |")
    print("|---|---|---|---|")
    for name, ms, graphs, compiles in rows:
        print(f"| {name} | {ms:.1f} | {graphs} | {compiles} |")


if __name__ == "__main__":
    main()
