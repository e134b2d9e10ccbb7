"""The host heap keeps freed buffers for the next step (runtime/host_heap.py).

Counts page faults, not time: a training step's new gradients and XLA's
temporaries must reuse the memory the step before freed instead of faulting
fresh pages in. Each case runs in a fresh interpreter, so the heap state is
the one a user's process starts with. (With glibc's defaults about half of
fresh processes fault ~4,600 pages in on every W1 step; which half depends
on which arena XLA's worker thread lands in, so that side is not asserted.)"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from lazyxla.runtime import host_heap

glibc_only = pytest.mark.skipif(host_heap._LIBC is None, reason="needs glibc's mallopt")

STEPS = """
import resource, torch, lazyxla as lx
from lazyxla import workloads
wl = workloads.make("mlp")          # W1: 22 MB of new gradients and 18 MB of XLA temporaries a step
dev = lx.device()
model = wl.model.to(dev)
x, y = wl.inputs.to(dev), wl.targets.to(dev)
opt = wl.optimizer(model.parameters(), foreach=True)
faults = []
for i in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    opt.zero_grad(set_to_none=True)
    wl.loss(model, x, y).backward()
    opt.step()
    lx.sync()
    lx.wait_device_ops()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(max(faults[3:]))
"""


def _max_faults_per_step(env: dict) -> int:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(STEPS)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1])


@glibc_only
def test_tune_takes_effect_on_glibc():
    assert host_heap.tune() is True


def test_tuning_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("LAZYXLA_HEAP_TUNING", "0")
    assert host_heap.tune() is False


@glibc_only
def test_steady_steps_reuse_freed_output_memory():
    # W1's 18 MiB of temporaries in fresh pages would be ~4,600 minor faults a
    # step; a few hundred come from the interpreter and torch growing now and then
    assert _max_faults_per_step({"LAZYXLA_HEAP_TUNING": "1"}) < 1200
