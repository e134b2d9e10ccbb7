"""lx.metrics: upstream's metrics scenarios (36-38) and counting rules, with the
PyTorch/XLA names users know (docs/compat.md, "torch_xla.debug.metrics (met)")."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from helpers import assert_close, rand

m = lx.metrics


pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def test_d36_alias_metric_and_clearing(dev):
    c = rand(3, 3, seed=36)
    x = c.to(dev)
    y = x * 3  # no in-place update: a compile with 0 donors
    lx.sync()
    assert "InputOutputAliasCount" in m.metric_names()
    total, acc, samples = m.metric_data("InputOutputAliasCount")
    assert (total, acc) == (1, 0.0)
    assert isinstance(samples, tuple) and len(samples) == 1
    ts, value = samples[0]
    assert isinstance(ts, float) and value == 0.0
    assert m.counter_value("UncachedCompile") == 1
    assert m.counter_value("MarkStep") == 1
    m.clear_metrics()
    assert "InputOutputAliasCount" not in m.metric_names()
    assert m.metric_data("InputOutputAliasCount") is None
    assert m.counter_value("UncachedCompile") == 1  # counters untouched
    m.clear_counters()
    for name in ("UncachedCompile", "MarkStep", "CreateCompileHandles"):
        assert m.counter_value(name) is None
        assert name not in m.counter_names()
        assert name not in m.report()
    assert m.counter_value("NoSuchCounter") is None
    assert m.metric_data("NoSuchMetric") is None
    assert_close(y, c * 3)


def test_d37_cache_hits_add_no_alias_sample(dev):
    c = rand(4, 5, seed=37)
    t1 = c.to(dev)
    m.clear_all()
    t1 += 1
    lx.sync()
    t1 *= 100
    lx.sync()
    assert m.metric_data("InputOutputAliasCount")[:2] == (2, 2.0)
    cached = m.counter_value("CachedCompile") or 0
    for _ in range(2):  # scenario 4's second step shape, twice more
        t1 *= 100
        lx.sync()
    assert m.metric_data("InputOutputAliasCount")[:2] == (2, 2.0)
    assert m.counter_value("CachedCompile") == cached + 2
    assert m.counter_value("UncachedCompile") == 2
    assert m.metric_data("CompileTime")[0] == 2
    assert m.metric_data("ExecuteTime")[0] == 4
    assert_close(t1, (c + 1) * 100 ** 3, rtol=1e-5)


def test_d38_short_report(dev):
    c = rand(3, seed=38)
    x = c.to(dev)
    y = x + 1
    assert_close(y.cpu(), c + 1)  # a compile, and bytes back from the device
    report = m.short_report(["CreateCompileHandles"], ["InboundData", "InputOutputAliasCount"])
    assert "InboundData" in report
    assert "InputOutputAliasCount" in report
    assert "CreateCompileHandles" in report
    assert "CompileTime" not in report
    default = m.short_report()
    assert "CompileTime" in default and "InputOutputAliasCount" in default


def test_short_report_appends_host_fallback_counters(dev):
    from lazyxla.frontend.primitives import op_info
    from lazyxla.frontend.fallback import run_on_host
    x = rand(4, seed=39).to(dev)
    op = torch.ops.aten.add.Tensor
    with pytest.warns(UserWarning):
        y = run_on_host(op, op_info(op), (x, x), {})
    assert m.counter_value("aten::add") == 1
    assert "aten::add" in m.short_report(["MarkStep"], ["CompileTime"])
    assert "aten::add" in m.counter_names()
    assert_close(y, rand(4, seed=39) * 2)


def test_donation_counters_and_metrics(dev):
    c = rand(6, seed=40)
    a, b = c.to(dev), (c * 2).to(dev)
    assert m.counter_value("XlaSetBufferDonation") is None
    assert lx.set_buffer_donation([a, b]) == [True, True]
    assert m.counter_value("XlaSetBufferDonation") == 2
    assert lx.set_buffer_donation(a + 1) is False  # pending: not counted
    assert m.counter_value("XlaSetBufferDonation") == 2
    out = a + b
    lx.sync()
    assert m.metric_data("InputOutputAliasCount")[:2] == (1, 2.0)
    assert m.metric_data("DonatedBytes")[1] == 2 * 6 * 4
    assert "XlaSetBufferDonation" in m.report()
    assert_close(out, c * 3)


def test_report_format_and_time_metrics(dev):
    c = rand(2, 2, seed=41)
    x = c.to(dev)
    x.add_(1)
    assert_close(x.cpu(), c + 1)
    report = m.report()
    for name in ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"):
        assert f"Metric: {name}" in report
        total, acc, samples = m.metric_data(name)
        assert total >= 1 and acc > 0  # nanoseconds
        assert all(v > 0 for _, v in samples)
    assert "TotalSamples" in report and "Accumulator" in report
    assert "Counter: UncachedCompile" in report and "Value: 1" in report
    # metric names and counter names are sorted and list only non-zero entries
    assert m.counter_names() == sorted(m.counter_names())
    assert m.metric_names() == sorted(m.metric_names())
    m.clear_all()
    assert m.report() == "" and m.counter_names() == [] and m.metric_names() == []


def test_op_records_are_off_by_default_and_count_each_traced_op(dev):
    assert not m.op_records_enabled()
    m.clear_all()
    x = torch.ones(3, device=dev)
    (x + 1).sum()
    assert not [n for n in m.counter_names() if n.startswith("xla::")]
    assert m.metric_data("LazyTracing") is None
    m.set_op_records(True)
    try:
        m.clear_all()
        t = torch.tensor([1.0, 2.0], device=dev)   # one fresh tensor (the upload)
        assert m.counter_value("CreateXlaTensor") == 1
        t += 2
        u = t * 3
        assert m.counter_value("xla::add_") == 1 and m.counter_value("xla::mul") == 1
        assert m.counter_value("CreateXlaTensor") == 2   # add_ returns t itself
        assert u.sum().item() == 21.0                    # a host value: upstream's fallback name
        assert m.counter_value("aten::_local_scalar_dense") == 1
        assert m.metric_data("LazyTracing")[0] >= 4
    finally:
        m.set_op_records(False)


@pytest.fixture
def detailed():
    m.set_op_records(True)
    try:
        yield
    finally:
        m.set_op_records(False)


def test_detailed_records_per_graph_and_tensor(dev, detailed):
    from lazyxla.sync.pipeline import LastGraph
    x = rand(8, seed=40).to(dev)
    y = x * 3 + 1           # two lifted scalars
    lx.sync()               # no wait: reading the metrics waits for the run's measurement
    assert m.metric_data("ExecuteReadyTime")[0] == 1
    assert m.metric_data("TensorsGraphSize")[:2] == (1, LastGraph.n_nodes)
    for name in ("UnwrapXlaData", "WrapXlaData", "DeviceLockWait", "ExecuteTime"):
        assert m.metric_data(name)[0] == 1, name
    assert m.counter_value("UploadedScalars") == 2
    assert_close(y, rand(8, seed=40) * 3 + 1)
    before = m.counter_value("DestroyXlaTensor") or 0
    del y
    assert m.counter_value("DestroyXlaTensor") == before + 1


def test_detailed_records_are_off_by_default(dev):
    x = rand(8, seed=41).to(dev)
    y = x * 3
    lx.sync()
    del y
    lx.wait_device_ops()
    names = set(m.metric_names()) | set(m.counter_names())
    assert not names & {"ExecuteReadyTime", "TensorsGraphSize", "UnwrapXlaData", "WrapXlaData",
                        "DeviceLockWait", "DestroyXlaTensor", "CreateXlaTensor"}
    assert m.metric_data("ExecuteTime")[0] == 1 and m.counter_value("UploadedScalars") == 1


def test_ready_time_waits_for_donated_outputs(dev, detailed):
    # every step donates the previous step's output: the waiter must still record each run
    x = rand(16, seed=42).to(dev)
    for _ in range(5):
        x.mul_(1.5)
        lx.sync()
    assert m.metric_data("ExecuteReadyTime")[0] == 5
    assert_close(x, rand(16, seed=42) * 1.5 ** 5, rtol=1e-4)


def test_every_sync_entry_point_counts_its_lock_wait(dev, detailed):
    # Host reads and graph inspection take the runtime lock as barriers do (sync/entry.py),
    # so DeviceLockWait has one sample per entry point that ran.
    x = rand(8, seed=41).to(dev)
    lx.sync()
    assert m.metric_data("DeviceLockWait")[0] == 1
    y = x * 2
    lx.graph_hash([y])                       # inspection
    assert m.metric_data("DeviceLockWait")[0] == 2
    assert_close(y, rand(8, seed=41) * 2)    # a host read
    assert m.metric_data("DeviceLockWait")[0] == 3
    lx.sync_tensors([x + 1])                 # a partial sync
    assert m.metric_data("DeviceLockWait")[0] == 4
