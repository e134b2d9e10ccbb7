"""Runs killed with SIGKILL and restarted end with an uninterrupted run's parameters
(rtol 1e-5): between steps, in the middle of a checkpoint's data files, and between the
commit marker and the rename; natively (lx.spmd.CheckpointManager) and as a PyTorch/XLA
script under `python -m lazyxla.compat` (torch_xla's CheckpointManager). The scripts and
kill points are in tests/fault_scripts/."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch
from helpers import child_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPTS = os.path.join(HERE, "fault_scripts")


def _run(api: str, ckpt, out, kill: str = "") -> subprocess.CompletedProcess:
    script = os.path.join(SCRIPTS, f"resume_{api}.py")
    launcher = [sys.executable, "-m", "lazyxla.compat"] if api == "torch_xla" else [sys.executable]
    env = child_env(PYTHONPATH=os.pathsep.join([SCRIPTS, child_env()["PYTHONPATH"]]), PYTHONWARNINGS="ignore")
    return subprocess.run([*launcher, script, "--ckpt", str(ckpt), "--out", str(out), "--kill", kill],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def _start(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr[-3000:]
    return next(line for line in done.stdout.splitlines() if line.startswith("START "))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("reference")
    _start(_run("native", tmp / "ckpt", tmp / "params.pt"))
    return torch.load(tmp / "params.pt")


# (kill, what the restart finds: "START <step> <committed steps>")
CASES = [("between:5", "START 4 [2, 4]"), ("write:4", "START 2 [2]"), ("commit:6", "START 4 [2, 4]")]


@pytest.mark.slow
@pytest.mark.parametrize("api", ["native", "torch_xla"])
@pytest.mark.parametrize("kill,restart", CASES, ids=[k.split(":")[0] for k, _ in CASES])
def test_killed_run_restarts_to_the_uninterrupted_parameters(tmp_path, reference, api, kill, restart):
    killed = _run(api, tmp_path / "ckpt", tmp_path / "params.pt", kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (tmp_path / "params.pt").exists()
    resumed = _run(api, tmp_path / "ckpt", tmp_path / "params.pt")
    assert _start(resumed) == restart
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["6", "8"]     # max_to_keep=2, no leftovers
    for got, want in zip(torch.load(tmp_path / "params.pt"), reference):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
