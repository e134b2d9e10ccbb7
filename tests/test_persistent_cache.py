"""LAZYXLA_CACHE_DIR: compiled executables persist across processes."""
import os
import subprocess
import sys

SCRIPT = """
import torch, lazyxla as lx
x = torch.arange(6.0).reshape(2, 3).to(lx.device())
y = (x @ x.t()).relu() + 1.5
print(y.tolist())
"""


def test_second_process_reuses_the_disk_cache(tmp_path):
    env = dict(os.environ, LAZYXLA_CACHE_DIR=str(tmp_path / "cache"))
    first = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    entries = os.listdir(tmp_path / "cache")
    assert any(e.startswith("jit_program") for e in entries), entries
    second = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert first.stdout == second.stdout == "[[6.5, 15.5], [15.5, 51.5]]\n"
    assert sorted(os.listdir(tmp_path / "cache")) == sorted(entries)  # nothing new compiled
