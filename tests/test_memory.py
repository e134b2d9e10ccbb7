"""Device memory figures, the memory report and out-of-memory errors (issue #21)."""
import gc
import sys

import pytest
import torch

import lazyxla as lx
from lazyxla.runtime import memory

MB = 2**20


def test_memory_allocated_follows_a_tensor_and_the_peak_stays(dev):
    gc.collect()
    torch.lazyxla.reset_peak_memory_stats()
    before = torch.lazyxla.memory_allocated()
    t = torch.randn(4 * MB, device=dev)          # 16 MB, pending until the sync
    assert torch.lazyxla.memory_allocated() == before
    lx.sync()
    assert torch.lazyxla.memory_allocated() == before + 16 * MB
    assert torch.lazyxla.max_memory_allocated() >= before + 16 * MB
    del t
    gc.collect()
    assert torch.lazyxla.memory_allocated() == before
    assert torch.lazyxla.max_memory_allocated() >= before + 16 * MB
    torch.lazyxla.reset_peak_memory_stats(dev)
    assert torch.lazyxla.max_memory_allocated(0) == before


def test_donation_releases_the_buffer_at_once(dev):
    w = torch.ones(MB).to(dev)                   # 4 MB
    lx.sync()
    base = torch.lazyxla.memory_allocated()
    for _ in range(3):
        w.mul_(2)                                # in place: the old buffer is donated
        lx.sync()
        assert torch.lazyxla.memory_allocated() == base
    assert lx.debug.donation_report().donors == 1


def test_peak_includes_the_executing_graphs_temporaries(dev):
    x = torch.randn(1024, 1024).to(dev)
    lx.sync()
    torch.lazyxla.reset_peak_memory_stats()
    live = torch.lazyxla.memory_allocated()
    s = torch.sort(x, dim=1).values.sum()
    lx.sync()
    temps = lx.debug.donation_report().memory["temp_size_in_bytes"]
    assert temps >= 4 * MB                       # the sorted values are a temporary of the graph
    assert torch.lazyxla.max_memory_allocated() >= live + temps
    assert torch.lazyxla.memory_allocated() == live + s.element_size()


def test_memory_info_stats_and_compat(dev):
    info = lx.memory_info()
    assert {"bytes_used", "bytes_limit", "peak_bytes_used"} <= set(info)
    assert all(type(info[k]) is int for k in ("bytes_used", "bytes_limit", "peak_bytes_used"))
    assert info["bytes_limit"] > 0 and info["peak_bytes_used"] >= info["bytes_used"]
    assert lx.memory_info(dev)["bytes_limit"] == lx.memory_info(0)["bytes_limit"]
    stats = torch.lazyxla.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.lazyxla.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == torch.lazyxla.max_memory_allocated()
    with pytest.raises(ValueError, match="does not exist"):
        lx.memory_info(lx.device_count())
    with pytest.raises(ValueError, match="expected a lazyxla device"):
        torch.lazyxla.memory_allocated("cpu")
    import lazyxla.compat as compat
    compat.install()
    try:
        import torch_xla.core.xla_model as xm
        assert set(xm.get_memory_info(dev)) >= {"bytes_used", "bytes_limit", "peak_bytes_used"}
    finally:
        compat.uninstall()


def test_memory_report_names_roles_and_the_largest_buffers(dev):
    model = torch.nn.Linear(4096, 1024).to(dev)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4096).to(dev)).sum().backward()
    opt.step()
    other = torch.zeros(1024, 4096).to(dev) + 1
    lx.sync()
    report = lx.debug.memory_report(top=20)
    text = str(report)
    assert "[1024, 4096]" in text
    big = [r for r in report.largest if r["shape"] == [1024, 4096]]
    assert sorted(r["role"] for r in big) == ["gradients", "optimizer state", "optimizer state", "other",
                                              "parameters"]
    assert all(r["bytes"] == 16 * MB for r in big)
    assert report.by_role["parameters"]["bytes"] >= 16 * MB + 4096
    assert report.by_role["optimizer state"]["buffers"] >= 4      # exp_avg, exp_avg_sq per param
    assert "last graph" in text and "temporaries" in text and "aliased" in text
    assert len(lx.debug.memory_report(top=2).largest) == 2
    with pytest.raises(ValueError, match="top"):
        lx.debug.memory_report(top=-1)
    del other


def test_a_graph_that_does_not_fit_raises_with_the_report_and_later_syncs_work(dev):
    keep = torch.ones(1024, 4096).to(dev)        # a live [1024, 4096] tensor the report names
    small = torch.arange(4.0).to(dev) * 3
    lx.sync()
    limit = torch.lazyxla.memory_allocated() + 48 * MB
    with memory.limit_for_testing(0, limit):
        a = torch.zeros(8 * MB, device=dev) + 1  # 32 MB each: each fits, both do not
        b = torch.zeros(8 * MB, device=dev) + 2
        with pytest.raises(torch.OutOfMemoryError) as info:
            lx.sync()
        text = str(info.value) + " ".join(getattr(info.value, "__notes__", ()))
        assert "out of memory on device 0" in text and "lazyxla device memory" in text
        assert "[1024, 4096]" in text and "the step barrier was not applied" in text
        assert a.shape == (8 * MB,)              # still pending: the tensors lost nothing
        del b, info                              # (the traceback holds the failed graph's storages)
        gc.collect()
        lx.sync()                                # fits now
        assert a[:3].tolist() == [1.0, 1.0, 1.0]
    assert small.tolist() == [0.0, 3.0, 6.0, 9.0]
    assert keep[0, :2].tolist() == [1.0, 1.0]


def test_the_backends_out_of_memory_becomes_the_same_error(dev, monkeypatch):
    from lazyxla.compile import cache
    x = torch.ones(3).to(dev)
    y = x * 5
    real = cache.get_or_compile

    def exhausted(graph, donors, *eager):
        exe = real(graph, donors, *eager)
        wrapped = cache.Executable(exe.key_hex, exe.donors, exe.compiled, exe.n_params, exe.compile_ns)

        def fail(*args):
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12 bytes.")
        wrapped.call = fail
        return wrapped
    monkeypatch.setattr(sys.modules["lazyxla.sync.pipeline"], "get_or_compile", exhausted)
    with pytest.raises(torch.OutOfMemoryError, match="RESOURCE_EXHAUSTED") as info:
        lx.sync()
    assert "lazyxla device memory" in str(info.value)
    monkeypatch.undo()
    assert y.tolist() == [5.0, 5.0, 5.0]


def test_deepcopy_of_a_model_keeps_the_ledger_and_the_values_apart(dev):
    """copy.deepcopy of lazy tensors (EMA models, Trainer's model copies) shares their
    immutable device buffers: the ledger counts each buffer once and releases it once (a
    copied handle used to release its buffer twice and drive the counts negative), and an
    in-place update of the copy leaves the original as it was."""
    import copy
    model = torch.nn.Linear(4, 4).to(dev)
    lx.sync()
    gc.collect()   # earlier tests' garbage
    before = torch.lazyxla.memory_stats(dev)["active.all.current"]
    twin = copy.deepcopy(model)
    assert torch.lazyxla.memory_stats(dev)["active.all.current"] == before
    with torch.no_grad():
        twin.weight.add_(1)
    lx.sync()
    assert torch.equal(twin.weight.cpu(), model.weight.cpu() + 1)
    del twin
    gc.collect()
    assert torch.lazyxla.memory_stats(dev)["active.all.current"] == before
