"""lx.spmd.CheckpointManager under faults (docs/reliability.md, "Checkpoints"): atomic
commits, damaged files, a full disk, SIGTERM. The kills of whole runs are in
tests/test_fault_kills.py."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import pytest
import torch

import lazyxla as lx
from lazyxla.spmd import commit

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _state(dev, value: float, n: int = 8) -> dict:
    return {"w": torch.full((n,), value).to(dev), "meta": {"step": int(value)}}


def _restored(manager, step: int, dev, n: int = 8) -> torch.Tensor:
    state = _state(dev, -1.0, n)
    manager.restore(step, state)
    return state["w"].cpu()


def test_only_committed_checkpoints_are_listed_and_stale_saves_removed(dev, tmp_path):
    manager = lx.spmd.CheckpointManager(str(tmp_path), save_interval=2, save_on_preemption=False)
    assert not manager.save(1, _state(dev, 1.0)) and manager.all_steps() == []
    assert manager.save(2, _state(dev, 2.0)) and manager.all_steps() == [2]
    assert sorted(os.listdir(tmp_path)) == ["2"]
    assert commit.MARKER in os.listdir(tmp_path / "2")
    # what a save killed before its commit leaves, and a drop killed halfway
    (tmp_path / "4.tmp").mkdir()
    (tmp_path / "4.tmp" / "__0_0.distcp").write_bytes(b"partial")
    (tmp_path / "6").mkdir()                      # a folder without a marker
    (tmp_path / "1.drop-5.tmp").mkdir()
    again = lx.spmd.CheckpointManager(str(tmp_path), save_interval=2, save_on_preemption=False)
    assert again.all_steps() == [2] and again.latest_step() == 2
    assert sorted(os.listdir(tmp_path)) == ["2", "6"]     # .tmp folders removed
    torch.testing.assert_close(_restored(again, 2, dev), torch.full((8,), 2.0))
    with pytest.raises(ValueError, match="no complete checkpoint of step 6"):
        again.restore(6, _state(dev, 0.0))


def test_max_to_keep_and_resaving_a_step(dev, tmp_path):
    manager = lx.spmd.CheckpointManager(str(tmp_path), save_interval=1, max_to_keep=2, save_on_preemption=False)
    for step in (1, 2, 3):
        manager.save(step, _state(dev, float(step)))
    assert manager.all_steps() == [2, 3] and sorted(os.listdir(tmp_path)) == ["2", "3"]
    manager.save(2, _state(dev, 20.0))     # replaces step 2; now the newest
    assert manager.all_steps() == [3, 2]
    torch.testing.assert_close(_restored(manager, 2, dev), torch.full((8,), 20.0))


@pytest.mark.parametrize("damage", ["truncated", "flipped", "missing", "marker"])
def test_damaged_checkpoint_names_the_file_and_earlier_one_restores(dev, tmp_path, damage):
    manager = lx.spmd.CheckpointManager(str(tmp_path), save_interval=1, save_on_preemption=False)
    manager.save(1, _state(dev, 1.0))
    manager.save(2, _state(dev, 2.0))
    data = tmp_path / "2" / "__0_0.distcp"
    if damage == "truncated":
        data.write_bytes(data.read_bytes()[:20])
        target, match = data, "has 20 bytes"
    elif damage == "flipped":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
        target, match = data, "does not match the checksum"
    elif damage == "missing":
        data.unlink()
        target, match = data, "is missing"
    else:
        target = tmp_path / "2" / commit.MARKER
        target.write_text("{not json")
        match = "commit marker .* is damaged"
    with pytest.raises(lx.CheckpointError, match=match) as info:
        if damage == "marker":
            lx.spmd.CheckpointManager(str(tmp_path), save_interval=1, save_on_preemption=False)
        else:
            manager.restore(2, _state(dev, 0.0))
    assert str(target) in str(info.value)
    if damage != "marker":
        torch.testing.assert_close(_restored(manager, 1, dev), torch.full((8,), 1.0))


def test_damage_found_without_verification_is_still_a_checkpoint_error(dev, tmp_path):
    manager = lx.spmd.CheckpointManager(str(tmp_path), save_interval=1, save_on_preemption=False, verify=False)
    manager.save(1, _state(dev, 1.0))
    data = tmp_path / "1" / "__0_0.distcp"
    data.write_bytes(data.read_bytes()[:20])
    with pytest.raises(lx.CheckpointError, match=f"restoring step 1 from {tmp_path / '1'} failed"):
        manager.restore(1, _state(dev, 0.0))


@contextlib.contextmanager
def _small_disk(path, kilobytes: int):
    """A tmpfs of `kilobytes` at `path` (root only); skips the test when it cannot mount."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kilobytes}k", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _fill_then_fail(monkeypatch):
    """A write that fails on purpose, as a full disk does, after a first file was written."""
    import torch.distributed.checkpoint.filesystem as fs
    original = fs._write_item

    def write_item(*args, **kwargs):
        result = original(*args, **kwargs)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fs, "_write_item", write_item)


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_full_disk_is_a_clear_error_and_the_previous_checkpoint_restores(dev, tmp_path, monkeypatch, disk):
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(_small_disk(tmp_path / "disk", 256)) if disk == "tmpfs" else tmp_path
        manager = lx.spmd.CheckpointManager(str(base / "ck"), save_interval=1, save_on_preemption=False)
        manager.save(1, _state(dev, 1.0))
        if disk == "injected":
            _fill_then_fail(monkeypatch)
        big = _state(dev, 2.0, n=100_000)    # 400 kB: more than the tmpfs holds
        with pytest.raises(lx.CheckpointError) as info:
            manager.save(2, big)
        message = str(info.value)
        assert "saving step 2" in message and "the disk is full" in message
        assert f"while writing {base / 'ck' / '2.tmp'}" in message
        assert "earlier checkpoints are intact (steps [1])" in message
        monkeypatch.undo()
        assert manager.all_steps() == [1] and sorted(os.listdir(base / "ck")) == ["1"]
        torch.testing.assert_close(_restored(manager, 1, dev), torch.full((8,), 1.0))
        again = lx.spmd.CheckpointManager(str(base / "ck"), save_interval=1, save_on_preemption=False)
        assert again.all_steps() == [1]


def test_failed_async_save_is_raised_by_join(dev, tmp_path, monkeypatch):
    manager = lx.spmd.CheckpointManager(str(tmp_path), save_interval=1, save_on_preemption=False)
    manager.save_async(1, _state(dev, 1.0))
    manager.join()
    _fill_then_fail(monkeypatch)
    assert manager.save_async(2, _state(dev, 2.0))
    with pytest.raises(lx.CheckpointError, match="saving step 2"):
        manager.join()
    assert manager.all_steps() == [1]


def test_sigterm_saves_at_the_next_step_and_training_resumes_there(dev, tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(6, 8), torch.randn(6, 4)

    def make():
        torch.manual_seed(1)
        model = torch.nn.Linear(8, 4).to(dev)
        return model, torch.optim.AdamW(model.parameters(), lr=0.05)

    def train(model, opt, start, stop, manager=None):
        for step in range(start, stop):
            loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step == 3 and manager is not None:
                os.kill(os.getpid(), signal.SIGTERM)     # the notice arrives mid-step
            if manager is not None and manager.save(step + 1, {"model": model.state_dict(),
                                                               "optim": opt.state_dict()}):
                if manager.reached_preemption(step + 1):
                    return step + 1
        return stop

    model, opt = make()
    train(model, opt, 0, 8)
    reference = [p.cpu() for p in model.parameters()]

    manager = lx.spmd.CheckpointManager(str(tmp_path), save_interval=100)
    try:
        model, opt = make()
        stopped = train(model, opt, 0, 8, manager)
        assert stopped == 4 and manager.all_steps() == [4]     # saved at the step after the notice
    finally:
        lx.spmd.preemption.deactivate()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    model, opt = make()
    resumed = lx.spmd.CheckpointManager(str(tmp_path), save_interval=100, save_on_preemption=False)
    start = resumed.restore_latest({"model": model.state_dict(), "optim": opt.state_dict()}, opt)
    assert start == 4
    train(model, opt, start, 8)
    for a, b in zip(reference, model.parameters()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=0)
