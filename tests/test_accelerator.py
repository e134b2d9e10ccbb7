"""lazyxla as torch's accelerator (issue #31): torch.accelerator.*, torch.lazyxla.* and
Tensor.pin_memory() answer for the lazyxla device, and CPU-only code keeps working."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader

import lazyxla as lx
from lazyxla import patches
from helpers import child_env

MB = 2**20


def test_lazyxla_is_the_current_accelerator():
    assert torch.accelerator.current_accelerator().type == "lazyxla"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == lx.device_count()


def test_accelerator_memory_figures_follow_a_tensor(dev):
    gc.collect()
    torch.accelerator.reset_peak_memory_stats()
    before = torch.accelerator.memory_allocated()
    assert before == torch.lazyxla.memory_allocated()
    t = torch.randn(MB, device=dev)
    lx.sync()
    assert torch.accelerator.memory_allocated() == before + 4 * MB
    assert torch.accelerator.max_memory_allocated(0) >= before + 4 * MB
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == before + 4 * MB
    assert stats["bytes_limit"] == lx.memory_info()["bytes_limit"]
    free, total = torch.accelerator.get_memory_info()
    assert total == lx.memory_info()["bytes_limit"] and 0 <= free <= total
    assert torch.lazyxla.mem_get_info() == (free, total)
    del t
    gc.collect()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_allocated() == before
    torch.accelerator.reset_accumulated_memory_stats()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_synchronize_waits_for_scheduled_work(dev):
    x = torch.randn(64, 64, device=dev)
    y = (x @ x).sum()
    lx.sync()                              # scheduled, maybe still running
    torch.accelerator.synchronize()
    torch.lazyxla.synchronize(dev)
    torch.accelerator.empty_host_cache()
    assert torch.allclose(y.cpu(), (x.cpu() @ x.cpu()).sum(), rtol=1e-4)


def test_pin_memory_copies_like_torch(dev):
    x = torch.randn(3, 5).t()
    pinned = x.pin_memory()
    assert torch.equal(pinned, x) and pinned.stride() == x.stride()
    assert pinned.data_ptr() != x.data_ptr()           # a new tensor, as torch's pin is
    x.add_(1)
    assert not torch.equal(pinned, x)
    assert torch.equal(pinned.to(dev, non_blocking=True).cpu(), pinned)


def test_dataloader_pin_memory_gives_the_same_batches():
    data = list(torch.arange(24.).reshape(8, 3))
    plain = list(DataLoader(data, batch_size=4))
    pinned = list(DataLoader(data, batch_size=4, pin_memory=True))
    assert all(torch.equal(a, b) for a, b in zip(plain, pinned, strict=True))


@pytest.mark.filterwarnings("ignore:The argument 'device'")
def test_a_pin_for_another_device_reaches_torchs_kernel():
    if torch.cuda.is_available():        # torch's kernel pins for CUDA
        pinned = torch.ones(2).pin_memory("cuda")
        assert pinned.is_pinned("cuda") and torch.equal(pinned, torch.ones(2))
        return
    with pytest.raises(RuntimeError, match="CUDA"):   # torch's kernel, torch's own message
        torch.ones(2).pin_memory("cuda")


def test_undo_restores_torchs_entry_points():
    hooks, pin = patches.get("torch_accelerator_hooks"), patches.get("cpu_pin_memory")
    hooks_state, pin_kernel = hooks._state, lx.frontend.accelerator._pin_memory
    originals = {attr: original for _, attr, original in hooks_state}
    try:
        hooks.undo()
        pin.undo()
        assert torch._C._accelerator_emptyCache is originals["_accelerator_emptyCache"]
        with pytest.raises(RuntimeError, match="not a DeviceAllocator"):
            torch.accelerator.memory_allocated()
        with pytest.raises(NotImplementedError, match="getPinnedMemoryAllocator"):
            torch.ones(2).pin_memory()
    finally:
        lx.frontend.accelerator.install()
    assert hooks.applied and pin.applied and pin_kernel is lx.frontend.accelerator._pin_memory
    assert torch.accelerator.memory_allocated() >= 0
    assert torch.equal(torch.ones(2).pin_memory(), torch.ones(2))


def test_import_lazyxla_keeps_cpu_only_code_working():
    script = textwrap.dedent("""
        import torch
        torch.manual_seed(0)
        def train():
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 1)
            opt = torch.optim.AdamW(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(list(torch.randn(8, 3)), batch_size=4, pin_memory=True)
            losses = []
            for x in loader:
                loss = model(x).pow(2).mean()
                loss.backward(); opt.step(); opt.zero_grad()
                losses.append(loss.item())
            return losses
        before = train()
        import lazyxla
        after = train()
        assert before == after, (before, after)
        torch.accelerator.empty_cache(); torch.accelerator.synchronize()
        print("ok", torch.accelerator.memory_allocated())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok 0"


@pytest.mark.parametrize("platform_stats, held", [
    ({"pool_bytes": 64 * MB, "peak_pool_bytes": 80 * MB}, (64 * MB, 80 * MB)),   # a GPU's BFC pool
    # a TPU: no pool; `bytes_reserved` is the runtime's own share, not what holds buffers
    ({"bytes_in_use": 48 * MB, "peak_bytes_in_use": 50 * MB, "bytes_reserved": 409600}, (48 * MB, 50 * MB)),
    ({"bytes_in_use": 1024, "bytes_reserved": 409600}, None),   # below the live bytes: never
])
def test_memory_reserved_reads_what_the_devices_allocator_holds(dev, monkeypatch, platform_stats, held):
    from lazyxla.runtime import memory
    t = torch.randn(MB, device=dev)   # 4 MB alive
    lx.sync()
    monkeypatch.setattr(memory, "backend_stats", lambda device: platform_stats)
    allocated = torch.lazyxla.memory_allocated()
    reserved, peak = held or (allocated, allocated)
    assert torch.accelerator.memory_reserved() == reserved >= allocated
    assert torch.accelerator.max_memory_reserved() == peak
    del t
