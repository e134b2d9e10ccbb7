"""scripts/tpu/largest_model.py (issue 49 item 6): the search finds the deepest W2 that
trains within a device's memory, and donation is what lets lazyxla train that deep. Run on
the CPU at the proxy size against a pretended limit (lazyxla refuses a graph beyond it as
on a full device)."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from helpers import child_env

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "tpu" / "largest_model.py"
LIMIT = ["--size", "proxy", "--limit-gib", "0.03"]


def _run(*args: str, **env: str) -> str:
    p = subprocess.run([sys.executable, str(SCRIPT), *args, *LIMIT], env=child_env(**env),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.slow   # a dozen child processes, about a minute
def test_the_search_finds_the_boundary_and_donation_is_what_reaches_it():
    out = _run("lazyxla")
    found = re.search(r"^LARGEST lazyxla none (\d+) \(out of memory at (\d+)\)$", out, re.M)
    assert found, out
    deepest, first_oom = map(int, found.groups())
    assert first_oom == deepest + 1 and deepest > 4
    # without donation the old parameters and optimizer state stay live beside the new ones
    assert "PROBE %d oom" % deepest in _run("lazyxla-nodonate", "--probe", str(deepest), LAZYXLA_ALIASING="0")
