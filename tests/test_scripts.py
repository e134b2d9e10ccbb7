"""The measurement scripts behind docs/benchmarks.md's floors run and print their rows
(values are timings, so only their presence is checked)."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from helpers import child_env

SCRIPTS = pathlib.Path(__file__).resolve().parent.parent / "scripts"


def _run(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=300, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("name, args, rows", [
    ("dispatch_floor.py", ("--ops", "50", "--rounds", "1"),
     ["eager CPU", "Null subclass (floor)", "lazyxla trace"]),
    ("read_floor.py", ("--tokens", "5"), ["eager CPU", "lazyxla"]),
    ("eager_step_overhead.py", (), ["eager W1-shaped step on 4-wide tensors"]),
])
def test_floor_script_prints_its_rows(name, args, rows):
    out = _run(name, *args)
    for row in rows:
        assert re.search(re.escape(row) + r"\s*:?\s+[0-9.]+ us", out), (row, out)


def test_step_floor_counts_the_same_ops_inside_both_dispatchers():
    """step_floor.py --inside --frames: the floor and lazy mode dispatch the same 605 ATen
    calls a W2 proxy step (counts, not timings, are checked)."""
    out = _run("step_floor.py", "--systems", "floor,lazyxla", "--inside", "--frames", "--steps", "2", "--top", "3")
    for system in ("floor", "lazyxla"):
        assert re.search(rf"inside __torch_dispatch__, {system}: 605 calls, [0-9.]+ ms, [0-9]+ Python calls", out), out


@pytest.mark.slow
def test_tpu_lowering_check_passes_on_cpu():
    """scripts/tpu/lowering_check.py, which the TPU runs: its barrier and complex checks
    pass here too (the W2 timing sections are the TPU's)."""
    out = _run("tpu/lowering_check.py", "--only", "barrier,complex")
    assert "FAIL" not in out and out.rstrip().endswith("PASS all: 0 check(s) failed"), out


def test_float32_math_reports_every_function_in_ulps():
    """scripts/tpu/float32_math.py, which the TPU runs: one row per function; XLA:CPU's exp,
    square root and division are correctly rounded to within an ulp."""
    out = _run("tpu/float32_math.py", "4096")
    rows = {line[:16].strip(): line[16:].split() for line in out.splitlines()[2:]}
    assert set(rows) == {"tanh", "tanh (|x| < 1)", "exp", "log", "log1p", "sigmoid", "sqrt", "rsqrt", "1 / x", "erf",
                         "float16 matmul", "bfloat16 matmul"}
    for name in ("exp", "sqrt", "1 / x", "float16 matmul", "bfloat16 matmul"):
        assert float(rows[name][0]) <= 1.0, out
