"""PyTorch/XLA's own example scripts (tests/compat_examples/, copied unmodified from
github.com/pytorch/xla) run through `python -m lazyxla.compat`, their printed losses
against the same model and step on eager CPU torch (tests/compat_examples/small_model/
reference.py, seed 42 as the base script's `__main__` seeds).

The base script takes flags for a small model and few steps; the eager examples take no
arguments, so small_model/ goes first on PYTHONPATH: its `train_decoder_only_base` loads
the real one and sets the trainer's defaults to the same small model (its docstring).
Every run starts in a scratch folder: `python -m` puts the working directory first on
sys.path, where the examples folder would shadow that harness."""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "tests", "compat_examples")
HARNESS = os.path.join(EXAMPLES, "small_model")
sys.path.insert(0, HARNESS)
from reference import FLAGS, losses  # noqa: E402
from helpers import child_env

STEPS = 12   # the closure of step 10 prints at step 11's opening barrier


def _run(cwd, script, *args, pythonpath=(), timeout=900, **env):
    path = os.pathsep.join([*pythonpath, child_env()["PYTHONPATH"]])
    out = subprocess.run([sys.executable, "-m", "lazyxla.compat", os.path.join(EXAMPLES, script), *args],
                         capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         env=child_env(PYTHONPATH=path, **env))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    return out.stdout


def _printed(stdout: str) -> list:
    return [(int(step), float(loss)) for step, loss in re.findall(r"step: (\d+), loss: (\S+),", stdout)]


@pytest.fixture(scope="module")
def eager_cpu():
    """The eager CPU losses of steps 0 and 10."""
    return losses(11)


def test_scan_examples_print_upstreams_values(tmp_path):
    out = _run(tmp_path, "scan/scan_examples.py", timeout=600)
    assert "Final sum: tensor([6.], device='xla:0')" in out
    assert re.search(r"History of sums tensor\(\[\[1\.\],\s+\[3\.\],\s+\[6\.\]\]", out)
    assert "Final carry: {'sum': tensor([15.], device='xla:0'), 'count': tensor([5.], device='xla:0')}" in out
    assert re.search(r"Means over time: tensor\(\[\[1\.0000\],\s+\[1\.5000\],\s+\[2\.0000\],\s+\[2\.5000\],"
                     r"\s+\[3\.0000\]\]", out)


@pytest.mark.slow
def test_decoder_base_example_matches_eager_cpu(tmp_path, eager_cpu):
    out = _run(tmp_path, "train_decoder_only_base.py", "--num-steps", str(STEPS), *FLAGS, "--print-metrics")
    printed = _printed(out)
    assert [s for s, _ in printed] == [0, 10]
    assert [loss for _, loss in printed] == pytest.approx(eager_cpu, rel=2e-5)
    # torch_xla.compile(full_graph=True): one graph a step; step 0 (no Adam state yet)
    # and step 1 compile, the others replay
    assert re.search(r"Counter: UncachedCompile\n  Value: [23]\n", out), out[-3000:]
    assert "Finished training in" in out


@pytest.mark.slow
def test_decoder_scan_example_matches_eager_cpu(tmp_path, eager_cpu):
    out = _run(tmp_path, "train_decoder_only_base.py", "decoder_with_scan.DecoderWithScan", "--num-steps",
               str(STEPS), *FLAGS, pythonpath=[os.path.join(EXAMPLES, "scan")])
    assert "Using decoder class: decoder_with_scan.DecoderWithScan" in out
    assert [loss for _, loss in _printed(out)] == pytest.approx(eager_cpu, rel=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["eager/train_decoder_only_eager.py",
                                    "eager/train_decoder_only_eager_with_compile.py"])
def test_eager_examples_match_eager_cpu(tmp_path, eager_cpu, script):
    out = _run(tmp_path, script, pythonpath=[HARNESS], COMPAT_EXAMPLE_STEPS="2")
    assert _printed(out) == [(0, pytest.approx(eager_cpu[0], rel=2e-5))]
