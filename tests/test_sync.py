"""Sync semantics, the graph key and the compile cache."""
import dataclasses
import threading

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from lazyxla import metrics


def counters(*names):
    return tuple(metrics.counter_value(n) or 0 for n in names)


def test_results_pending_until_sync(dev, fresh_compile_cache):
    x = torch.ones(3).to(dev)
    y = x * 2
    assert counters("UncachedCompile", "CachedCompile") == (0, 0)
    lx.sync()
    assert counters("UncachedCompile") == (1,)
    assert counters("MarkStep") == (1,)
    assert y.tolist() == [2.0, 2.0, 2.0]
    assert counters("UncachedCompile", "CachedCompile") == (1, 0)  # read needs no graph


def test_one_graph_per_sync_and_no_op_sync(dev):
    a = torch.randn(4).to(dev)
    b = a + 1
    c = b * a
    lx.sync()
    assert counters("ExecuteComputation") == (1,)
    lx.sync()
    lx.sync()
    assert counters("ExecuteComputation", "MarkStep") == (1, 3)
    torch.testing.assert_close(c.cpu(), (a.cpu() + 1) * a.cpu())


def test_changing_python_scalars_never_recompiles(dev):
    w = torch.ones(8).to(dev)
    for step in range(5):
        lr = 0.1 / (step + 1)
        w.sub_(w * lr)
        w.add_(step)           # int scalar changes too
        lx.sync()
    assert counters("UncachedCompile") == (1,)
    expected = torch.ones(8)
    for step in range(5):
        lr = 0.1 / (step + 1)
        expected.sub_(expected * lr)
        expected.add_(step)
    torch.testing.assert_close(w.cpu(), expected)


def test_graph_hash_ignores_values_and_sees_structure(dev):
    x1, x2 = torch.randn(4, 4).to(dev), torch.randn(4, 4).to(dev)
    h1 = lx.graph_hash([x1 @ x1 + 1.5])
    h2 = lx.graph_hash([x2 @ x2 + 7.0])
    assert h1 == h2
    assert lx.graph_hash([x1 @ x2]) != lx.graph_hash([x1 + x2])
    assert lx.graph_hash([(x1 * x2) + x1]) != lx.graph_hash([(x1 * x1) + x2])  # wiring is keyed


def test_sync_tensors_only_materialises_given(dev):
    x = torch.ones(2).to(dev)
    a, b = x + 1, x + 2
    lx.sync_tensors([a])
    assert counters("ExecuteComputation") == (1,)
    assert a.tolist() == [2.0, 2.0]
    assert counters("ExecuteComputation") == (1,)
    assert b.tolist() == [3.0, 3.0]
    assert counters("ExecuteComputation") == (2,)


def test_sync_tensors_rejects_cpu_tensor():
    with pytest.raises(TypeError, match="lazyxla tensors"):
        lx.sync_tensors([torch.ones(2)])


def test_wait_device_ops_and_async_sync(dev):
    x = torch.randn(256, 256).to(dev)
    for _ in range(3):
        x = torch.tanh(x @ x)
    lx.sync(wait=False)
    lx.wait_device_ops()
    assert torch.isfinite(x.cpu()).all()


def test_graph_size_cap_cuts_long_traces(dev, monkeypatch):
    monkeypatch.setattr(config, "SETTINGS", dataclasses.replace(config.SETTINGS, graph_op_limit=50))
    x = torch.zeros(3).to(dev)
    for _ in range(180):
        x = x + 1
    assert (metrics.counter_value("GraphSizeCut") or 0) >= 3
    assert x.tolist() == [180.0] * 3


def test_compile_cache_is_bounded(dev):
    import lazyxla.compile.cache as cache
    x = torch.ones(2).to(dev)
    with config.override(compile_cache_size=3):
        for k in range(6):
            y = x
            for _ in range(k + 1):
                y = y * 2
            lx.sync()
    assert cache.cache_size() <= 3


def test_print_and_item(dev):
    t = torch.tensor([[1.5, 2.0]], device=dev)
    text = repr(t)
    assert "1.5000" in text and "lazyxla:0" in text
    assert (t.sum()).item() == 3.5
    assert torch.tensor(7, device=dev).item() == 7


def test_factories_match_eager(dev):
    assert torch.arange(5, device=dev).tolist() == list(range(5))
    torch.testing.assert_close(torch.arange(0, 1, 0.25, device=dev).cpu(), torch.arange(0, 1, 0.25))
    assert torch.full((2,), 3.0, device=dev).tolist() == [3.0, 3.0]
    assert torch.zeros(2, 2, dtype=torch.int32, device=dev).dtype == torch.int32
    torch.testing.assert_close(torch.eye(3, device=dev).cpu(), torch.eye(3))
    torch.testing.assert_close(torch.linspace(0, 1, 5, device=dev).cpu(), torch.linspace(0, 1, 5))
    p = torch.randperm(10, device=dev).cpu()
    assert sorted(p.tolist()) == list(range(10))
    r = torch.randint(3, 9, (1000,), device=dev).cpu()
    assert r.min() >= 3 and r.max() < 9


def test_rng_reproducible_with_manual_seed(dev):
    torch.manual_seed(123)
    a = torch.randn(100, device=dev).cpu()
    b = torch.rand(100, device=dev).cpu()
    torch.manual_seed(123)
    a2 = torch.randn(100, device=dev).cpu()
    b2 = torch.rand(100, device=dev).cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a, torch.randn(100, device=dev).cpu())
    big = torch.randn(200_000, device=dev).cpu()
    assert abs(big.mean()) < 0.02 and abs(big.std() - 1) < 0.02
    u = torch.rand(200_000, device=dev).cpu()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_dropout_statistics(dev):
    torch.manual_seed(0)
    x = torch.ones(100_000, device=dev)
    y = torch.nn.functional.dropout(x, p=0.25, training=True).cpu()
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.01
    torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / 0.75))


def test_no_grad_and_autograd(dev):
    w = torch.randn(3, 3).to(dev).requires_grad_()
    x = torch.randn(5, 3).to(dev)
    with torch.no_grad():
        y = x @ w
    assert not y.requires_grad
    loss = (x @ w).relu().sum()
    loss.backward()
    w_cpu = w.detach().cpu().requires_grad_()
    (x.cpu() @ w_cpu).relu().sum().backward()
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def test_two_devices_if_available():
    if lx.device_count() < 2:
        pytest.skip("single device")
    a = torch.ones(2, device=lx.device(0))
    b = torch.ones(2, device=lx.device(1))
    with pytest.raises(RuntimeError):
        a + b


def test_unsupported_dtype_is_a_clear_error(dev):
    with pytest.raises(TypeError, match="not supported"):
        torch.zeros(2, dtype=torch.complex32).to(dev)


def test_sync_from_thread(dev):
    out = {}

    def work():
        x = torch.ones(2).to(dev) * 3
        lx.sync()
        out["v"] = x.tolist()
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert out["v"] == [3.0, 3.0]


def test_host_read_of_a_view_of_device_data_compiles_nothing(dev):
    # Issue #12: `w.grad.to("cpu")` of a transposed view of device data compiled and ran a
    # 3-node graph and added an InputOutputAliasCount sample; PyTorch/XLA copies it.
    lin = torch.nn.Linear(4, 3).to(dev)
    lin(torch.randn(2, 4).to(dev)).sum().backward()
    lx.sync(wait=True)
    expected = lin.weight.grad.cpu()
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    data = base.to(dev)
    y = torch.randn(3, 4).t().clone().to(dev)     # a device base with non-contiguous strides
    lx.sync(wait=True)
    metrics.clear_all()
    views = [lin.weight.grad.t(), data[1], data.transpose(0, 2)[1:3], data.permute(2, 0, 1).unsqueeze(0),
             data.view(6, 4)[::2], data.expand(2, 2, 3, 4), data.diagonal(0, 1, 2), data.unfold(2, 2, 1),
             data.flatten()[3:9].view(2, 3), y.t().view(-1)]
    hosts = [v.to("cpu") for v in views] + [views[1][0, 1].item()]
    torch.testing.assert_close(hosts[0], expected.t())
    eager = [base[1], base.transpose(0, 2)[1:3], base.permute(2, 0, 1).unsqueeze(0), base.view(6, 4)[::2],
             base.expand(2, 2, 3, 4), base.diagonal(0, 1, 2), base.unfold(2, 2, 1), base.flatten()[3:9].view(2, 3)]
    for got, want in zip(hosts[1:9], eager):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(hosts[9], y.cpu().t().reshape(-1))
    assert hosts[10] == base[1][0, 1].item()
    assert metrics.counter_value("UncachedCompile") is None and metrics.counter_value("CachedCompile") is None
    assert metrics.metric_data("InputOutputAliasCount") is None and metrics.metric_data("ExecuteTime") is None
    hosts[1].add_(1)                               # host copies are independent of each other
    assert data[1].cpu().equal(base[1])


def test_host_read_of_a_view_of_a_donated_base_raises(dev):
    a = torch.ones(3, 4).to(dev)
    v = a.t()
    assert lx.set_buffer_donation(a)
    consumer = a * 2
    lx.sync()
    assert lx.is_donated(a)
    with pytest.raises(lx.DonatedBufferError):
        v.cpu()
    assert consumer.t().cpu().equal(torch.full((4, 3), 2.0))
