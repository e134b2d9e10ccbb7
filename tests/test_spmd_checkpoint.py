"""lx.spmd.checkpoint: torch.distributed.checkpoint with lazyxla tensors.

In this process (one device, no SPMD): a model and AdamW state round-trip and training
continues as if uninterrupted. On 4 forced host devices (this file run as a script in a
subprocess, since the device count is fixed when JAX starts): sharded saves, resharding
loads, CPU shard snapshots, the planners' split. Slow: the 2-process example."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed.checkpoint as dcp
from helpers import child_env, needs_sockets

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _steps(model, opt, x, y, n: int, sync=lambda: None) -> list:
    # lazy: lazyxla is imported when a test runs, as everywhere in this file
    from lazyxla.examples._local_processes import train
    return train(opt, lambda: torch.nn.functional.mse_loss(model(x), y), n, sync)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_model_and_adamw_state_round_trip_and_training_continues(dev, tmp_path):
    import lazyxla as lx
    ck = lx.spmd.checkpoint
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    eager = _mlp()
    eager_losses = _steps(eager, torch.optim.AdamW(eager.parameters(), lr=0.05), x, y, 4)

    model = _mlp().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    xd, yd = x.to(dev), y.to(dev)
    first = _steps(model, opt, xd, yd, 2, lx.sync)
    ck.save({"model": model.state_dict(), "optim": opt.state_dict()}, str(tmp_path))

    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)
    fresh_opt = ck.prime_optimizer(torch.optim.AdamW(fresh.parameters(), lr=0.05))
    state = {"model": fresh.state_dict(), "optim": fresh_opt.state_dict()}
    ck.load(state, str(tmp_path))
    fresh_opt.load_state_dict(state["optim"])
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a.cpu(), b.cpu())
    second = _steps(fresh, fresh_opt, xd, yd, 2, lx.sync)
    torch.testing.assert_close(torch.tensor(first + second), torch.tensor(eager_losses), rtol=1e-5, atol=0)

    # PyTorch's own calls with the planners give the same; a mismatched shape is named
    other = _mlp().to(dev)
    dcp.load({"model": other.state_dict()}, checkpoint_id=str(tmp_path), planner=ck.LoadPlanner())
    assert torch.equal(other[0].weight.cpu(), model[0].weight.cpu())
    wrong = {"model": torch.nn.Sequential(torch.nn.Linear(8, 15), torch.nn.Tanh(),
                                          torch.nn.Linear(15, 4)).to(dev).state_dict()}
    with pytest.raises(Exception, match=r"model\.0\.weight"):
        ck.load(wrong, str(tmp_path))


def test_sharded_save_and_resharding_load_on_four_devices():
    out = subprocess.run([sys.executable, os.path.abspath(__file__)], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env=child_env(XLA_FLAGS="--xla_force_host_platform_device_count=4"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "OK sharded" in out.stdout


@pytest.mark.slow
@needs_sockets
def test_two_processes_save_and_another_mesh_loads_and_trains_like_eager():
    out = subprocess.run([sys.executable, "-m", "lazyxla.examples.spmd_checkpoint", "--check"], capture_output=True,
                         text=True, timeout=900, cwd=ROOT, env=child_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    assert "losses equal eager across the checkpoint" in out.stdout


def _sharded_checks() -> None:
    import warnings
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    import lazyxla as lx
    ck = lx.spmd.checkpoint
    lx.spmd.use_spmd()
    dev = lx.device()
    rows = lx.spmd.Mesh(range(4), (4,), ("x",))
    pairs = lx.spmd.Mesh([3, 2, 1, 0], (2, 2), ("a", "b"))
    source, target = _mlp().to(dev), torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                                         torch.nn.Linear(16, 4)).to(dev)
    lx.spmd.mark_sharding(source[0].weight, rows, ("x", None))
    lx.spmd.mark_sharding(source[2].weight, rows, (None, "x"))
    lx.spmd.mark_sharding(target[0].weight, pairs, ("b", "a"))
    lx.spmd.mark_sharding(target[2].bias, rows, ("x",))
    expected = {k: v.cpu() for k, v in source.state_dict().items()}

    planner = ck.SavePlanner()
    planner.set_up_planner(source.state_dict(), is_coordinator=True)
    assert sorted(planner.sharded_state_dict) == ["0.weight", "2.weight"]
    assert sorted(planner.unsharded_state_dict) == ["0.bias", "2.bias"]
    plan = planner.create_local_plan()
    assert sum(1 for item in plan.items if item.index.fqn == "0.weight") == 4   # one write per shard

    with tempfile.TemporaryDirectory() as path:
        ck.save(source.state_dict(), path)
        ck.load(target.state_dict(), path)
        for k, v in target.state_dict().items():
            assert torch.equal(v.cpu(), expected[k]), k
        assert lx.spmd.sharding_spec(target[0].weight) == ("b", "a")   # the target's sharding kept
        assert lx.spmd.sharding_spec(target[2].bias) == ("x",)

    # a host snapshot of the shards saves the same checkpoint; an unsharded one loads sharded
    snapshot = ck.sharded_cpu_state_dict(source.state_dict())
    assert isinstance(snapshot["0.weight"], ck.CpuShards) and len(snapshot["0.weight"].shards) == 4
    assert snapshot["0.bias"].device.type == "cpu" and ck.is_sharded(source[0].weight)
    with tempfile.TemporaryDirectory() as path:
        dcp.save(snapshot, checkpoint_id=path, planner=ck.SavePlanner())
        again = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)
        lx.spmd.mark_sharding(again[0].weight, pairs, (("a", "b"), None))
        assert not torch.equal(again[0].weight.cpu(), expected["0.weight"])
        ck.load(again.state_dict(), path)
        assert torch.equal(again[0].weight.cpu(), expected["0.weight"])
    with tempfile.TemporaryDirectory() as path:
        dcp.save({k: v for k, v in expected.items()}, checkpoint_id=path)   # plain CPU checkpoint
        ck.load(target.state_dict(), path)
        assert torch.equal(target[0].weight.cpu(), expected["0.weight"])
    print("OK sharded")


if __name__ == "__main__":
    _sharded_checks()
