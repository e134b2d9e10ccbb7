"""Eager mode (lx.experimental.eager_mode): each op runs on the device as it is called.

Values equal eager PyTorch on CPU; each op's graph compiles once per graph key (shapes,
dtypes; scalar values are operands), runs per call and is timed under the eager metrics;
donation and its errors stay as in lazy mode."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from helpers import assert_close, rand
from lazyxla.ir.node import DATA

m = lx.metrics
eager = lx.experimental

pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def samples(name: str) -> int:
    data = m.metric_data(name)
    return 0 if data is None else data[0]


def holds_data(t: torch.Tensor) -> bool:
    return t._st.value.op is DATA


def test_mlp_step_equals_eager_pytorch_and_every_result_is_device_data(dev):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    model.load_state_dict(cpu_model.state_dict())
    model.to(dev)
    x, target = rand(4, 5, seed=1), rand(4, 3, seed=2)
    opts = [torch.optim.SGD(mod.parameters(), lr=0.1, momentum=0.9) for mod in (cpu_model, model)]
    with eager.eager_mode_context(True):
        for _ in range(2):
            losses = []
            for mod, opt, xs, ts in ((cpu_model, opts[0], x, target), (model, opts[1], x.to(dev), target.to(dev))):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(mod(xs), ts)
                loss.backward()
                opt.step()
                losses.append(loss)
            assert holds_data(losses[1])
            assert all(holds_data(p) and holds_data(p.grad) for p in model.parameters())
            assert_close(losses[1], losses[0])
        compiles, runs = samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")
        assert compiles > 0 and runs > compiles   # the second step reuses the first one's executables
        lx.sync()   # nothing left to run
    assert samples("CompileTime") == 0 and samples("ExecuteTime") == 0
    assert (samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")) == (compiles, runs)
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        assert_close(p, q)


def test_one_compile_per_graph_key_not_per_call(dev):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(dev)
    with eager.eager_mode_context(True):
        y = x
        for i in range(5):
            y = y + i          # scalar values are operands: one executable
        assert (samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")) == (1, 5)
        z = y.sum(0) * 2.5     # two more ops, two more graphs
        w = x[:, :2] + 1.0     # a view of device data, read by one graph
        assert (samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")) == (4, 8)
        y2 = torch.ones(3, 4, device=dev)   # empty + fill: both run, as upstream
        y2 = y2 + 1
        assert samples("EagerOpExecuteTime") == 11
    assert_close(y, torch.arange(6.).reshape(2, 3) + 10)
    assert_close(z, (torch.arange(6.).reshape(2, 3) + 10).sum(0) * 2.5)
    assert_close(w, torch.arange(6.).reshape(2, 3)[:, :2] + 1.0)
    assert_close(y2, torch.full((3, 4), 2.0))
    assert m.counter_value("MarkStep") is None


def test_torch_tensor_and_add_run_two_graphs_as_upstream(dev):
    # upstream test_metrics.py test_eager_metrics: `empty` materialises, then the add
    with eager.eager_mode_context(True):
        t1 = torch.tensor(156, device=dev)
        t2 = t1 + 100
        assert holds_data(t1) and holds_data(t2)
        assert (samples("EagerOpCompileTime"), samples("EagerOpExecuteTime")) == (2, 2)
    assert t2.item() == 256


def test_inplace_ops_write_device_data_and_donate_the_old_buffer(dev):
    c = rand(3, 4, seed=3)
    t = c.to(dev)
    with eager.eager_mode_context(True):
        t.mul_(2).add_(1)
        t[0].zero_()        # a write through a view lands in the base
        assert holds_data(t)
    expected = c * 2 + 1
    expected[0] = 0
    assert_close(t, expected)
    assert m.metric_data("InputOutputAliasCount")[1] >= 1   # t's own buffer was reused


def test_donated_buffer_still_raises_in_eager_mode(dev):
    t0, t1 = rand(3, seed=4).to(dev), rand(3, seed=5).to(dev)
    with lx.explicit_donation(True):
        assert lx.set_buffer_donation(t0)
        _ = t0 + t1
        lx.sync(wait=True)
    assert lx.is_donated(t0)
    with eager.eager_mode_context(True):
        with pytest.raises(lx.DonatedBufferError, match="donated"):
            t0 * 2
        assert_close(t1 * 2, rand(3, seed=5) * 2)   # other tensors unaffected


def test_explicit_donor_used_by_an_eager_op_is_donated(dev):
    t = rand(4, seed=6).to(dev)
    with lx.explicit_donation(True), eager.eager_mode_context(True):
        assert lx.set_buffer_donation(t)
        y = t * 3
        assert lx.is_donated(t)
        with pytest.raises(lx.DonatedBufferError):
            t + 1
    assert_close(y, rand(4, seed=6) * 3)


def test_op_errors_are_eager_pytorchs_and_leave_nothing_pending(dev):
    a, b = rand(2, 3, seed=7).to(dev), rand(4, seed=8).to(dev)
    with eager.eager_mode_context(True):
        with pytest.raises(RuntimeError, match="broadcast|size of tensor"):
            a + b
        assert_close(a + 1, rand(2, 3, seed=7) + 1)


def test_pending_lazy_work_joins_the_first_eager_op_that_reads_it(dev):
    x = rand(3, seed=9).to(dev)
    pending = x * 2                       # lazy
    with eager.eager_mode_context(True):
        y = pending + 1
        assert holds_data(pending) and holds_data(y)
        assert samples("EagerOpExecuteTime") == 1
    assert_close(y, rand(3, seed=9) * 2 + 1)


def test_switch_context_and_bad_input():
    assert eager.is_eager_mode() is False
    with eager.eager_mode_context(True):
        assert eager.is_eager_mode()
        with eager.eager_mode_context(False):
            assert not eager.is_eager_mode()
        assert eager.is_eager_mode()
    assert not eager.is_eager_mode()
    eager.eager_mode(True)
    try:
        assert eager.is_eager_mode()
    finally:
        eager.eager_mode(False)
    with pytest.raises(TypeError, match="True or False"):
        eager.eager_mode("yes")
    with pytest.raises(TypeError, match="True or False"):
        with eager.eager_mode_context(1):
            pass
    assert not eager.is_eager_mode()


def test_lazy_mode_is_unchanged_after_eager_mode(dev):
    with eager.eager_mode_context(True):
        pass
    x = rand(3, seed=10).to(dev)
    y = x * 2 + 1
    assert not holds_data(y)
    lx.sync()
    assert samples("ExecuteTime") == 1 and samples("EagerOpExecuteTime") == 0


def test_decomposed_op_is_one_graph_and_updates_its_buffers(dev):
    # native_batch_norm runs lazyxla's decomposition (several ops, and a write into the
    # running stats): one graph for the call, every tensor it wrote holds device data
    x, rm, rv = rand(4, 3, 5, seed=11), torch.zeros(3), torch.ones(3)
    xd, rmd, rvd = x.to(dev), rm.to(dev), rv.to(dev)
    with eager.eager_mode_context(True):
        traced = m.counter_value("TracedOps") or 0
        y = torch.nn.functional.batch_norm(xd, rmd, rvd, training=True, momentum=0.1)
        assert holds_data(y) and holds_data(rmd) and holds_data(rvd)
        assert samples("EagerOpExecuteTime") < m.counter_value("TracedOps") - traced
    expected = torch.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.1)
    assert_close(y, expected)
    assert_close(rmd, rm)
    assert_close(rvd, rv)


def test_foreach_optimizer_step_writes_every_parameter(dev):
    torch.manual_seed(3)
    cpu = [torch.randn(3, 2, requires_grad=True), torch.randn(4, requires_grad=True)]
    lazy = [p.detach().to(dev).requires_grad_() for p in cpu]
    opts = [torch.optim.Adam(ps, lr=0.01, foreach=True) for ps in (cpu, lazy)]
    with eager.eager_mode_context(True):
        for _ in range(2):
            for ps, opt in zip((cpu, lazy), opts):
                opt.zero_grad()
                sum((p * p).sum() for p in ps).backward()
                opt.step()
            assert all(holds_data(p) for p in lazy)
            assert all(holds_data(s) for st in opts[1].state.values() for s in st.values()
                       if isinstance(s, torch.Tensor) and s.device.type == "lazyxla")
    for p, q in zip(lazy, cpu):
        assert_close(p, q, rtol=1e-5, atol=1e-6)
