"""SPMD on 8 forced host devices (tests/spmd_checks.py holds the checks; each group runs
in a subprocess because the device count is fixed when JAX starts), and a 2-process x
4-device data-parallel run on localhost (slow)."""
import os
import subprocess
import sys

import pytest
from helpers import child_env, needs_sockets

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)


def _run_group(group: str) -> None:
    env = child_env(XLA_FLAGS="--xla_force_host_platform_device_count=8")
    out = subprocess.run([sys.executable, os.path.join(HERE, "spmd_checks.py"), group], env=env,
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert f"OK {group}" in out.stdout


def test_spmd_basics():
    """SPEC G.51 and G.52, marking device data and pending IR, reads, shards, views,
    in-place updates, 2-D meshes, use_spmd() after tensors exist."""
    _run_group("basics")


def test_spmd_bad_input():
    """Errors for bad input, then two mesh mixes that used to fail (spmd_checks.check_mesh_regressions)."""
    _run_group("errors")


def test_spmd_device_loader_places_batches_by_spec():
    """lx.data.DeviceLoader(sharding=ShardingSpec | dict): shards placed at upload (spmd_checks.check_loader)."""
    _run_group("loader")


@pytest.mark.parametrize("workload", ["mlp", pytest.param("gpt", marks=pytest.mark.slow)])
def test_spmd_training(workload):
    """W1 / W2 (small) data parallel, FSDP on a 1-D and on a 2-D mesh: eager losses, no
    steady-state compiles, every parameter donated every step, shards of 1/k."""
    _run_group(workload)


def test_marking_needs_spmd_mode(dev):
    """In the test process (no SPMD): marking says how to turn SPMD on; nothing changes."""
    import torch
    import lazyxla as lx
    t = torch.ones(2).to(dev)
    mesh = lx.spmd.Mesh([0], (1,), ("x",))
    with pytest.raises(RuntimeError, match="use_spmd"):
        lx.spmd.mark_sharding(t, mesh, ("x",))
    assert not lx.spmd.is_spmd() and t.tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="before any lazyxla tensor exists"):
        lx.spmd.use_spmd()   # t exists


@pytest.mark.slow
@needs_sockets
def test_two_processes_data_parallel():
    env = child_env()
    env.pop("XLA_FLAGS", None)   # the launcher sets each process's device count
    out = subprocess.run([sys.executable, "-m", "lazyxla.examples.spmd_data_parallel", "--processes", "2",
                          "--devices-per-process", "4", "--steps", "3", "--check"],
                         env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    assert "losses equal eager in all 2 processes" in out.stdout, out.stdout
