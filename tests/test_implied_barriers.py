"""Step barriers lazyxla places itself (sync/barriers.py): `optimizer.step()` ends a step, a
host read materializes what shares its pending work, the graph-size cap warns."""
import copy
import dataclasses
import warnings

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from lazyxla.state import STATE
from helpers import float32_math_tolerance


def _counter(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def _model_pair(seed: int = 0):
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 3))
    lazy = copy.deepcopy(ref).to(lx.device())
    return ref, lazy


def _step(model, opt, x, y, read_before_step: bool) -> float:
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    value = loss.item() if read_before_step else None
    opt.step()
    return value if read_before_step else loss.item()


@pytest.fixture
def implied_on():
    lx.set_implied_barriers(True)
    yield
    lx.set_implied_barriers(True)


@pytest.mark.parametrize("read_before_step", [False, True])
def test_loop_without_barrier_is_flat_and_exact(dev, implied_on, read_before_step):
    """200 steps of forward, backward, AdamW step and a loss read, no lx.sync(): equal to
    eager every step, the same graphs every step, nothing compiled after warm-up."""
    ref, lazy = _model_pair()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
    xd, yd = x.to(dev), y.to(dev)
    warmup = 3
    graphs_per_step = []
    for step in range(200):
        if step == warmup:
            compiles_after_warmup = _counter("UncachedCompile")
        executed = _counter("ExecuteComputation")
        got = _step(lazy, opt, xd, yd, read_before_step)
        graphs_per_step.append(_counter("ExecuteComputation") - executed)
        want = _step(ref, opt_ref, x, y, read_before_step)
        # a TPU's float32 exp, log, sqrt and division are approximations (float32_math_tolerance)
        tol = float32_math_tolerance(1e-4, 1e-6)
        assert got == pytest.approx(want, rel=tol["rtol"], abs=tol["atol"]), step
    assert _counter("UncachedCompile") == compiles_after_warmup
    assert _counter("ImpliedBarrier") == 200
    # the read after the step reads device data; a read before it computes forward and
    # backward, and the barrier the optimizer step alone
    assert set(graphs_per_step[warmup:]) == {2 if read_before_step else 1}
    record = lx.debug.implied_barriers()[-1]
    assert record.reason == "optimizer.step" and record.where.startswith(__file__)
    for p, q in zip(lazy.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q, **float32_math_tolerance(1e-4, 1e-5))


def test_read_before_step_computes_the_forward_once(dev, implied_on):
    """The loss read takes the gradients into its graph: what is left for the step's
    barrier holds no matrix product of the forward or backward."""
    _, lazy = _model_pair()
    opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    x, y = torch.randn(8, 12, device=dev), torch.randint(0, 3, (8,), device=dev)
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(lazy(x), y)
        loss.backward()
        assert "addmm" in lx.debug.ir_text() and "mm" in lx.debug.ir_text()
        reads = _counter("WideRead")
        loss.item()
        assert _counter("WideRead") == reads + 1
        assert all(p.grad is not None for p in lazy.parameters())
        assert lx.debug.ir_text().count("mm") == 0   # the grads are device data now
        opt.step()
        assert lx.debug.ir_text().strip() == "(nothing pending)"


def test_switched_off_is_the_old_behaviour(dev, implied_on):
    """Without implied barriers a loop that never syncs keeps its parameters pending (the
    graph grows each step) and a read computes only what it reads."""
    lx.set_implied_barriers(False)
    assert not lx.implied_barriers_enabled()
    _, lazy = _model_pair()
    opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    x, y = torch.randn(8, 12, device=dev), torch.randint(0, 3, (8,), device=dev)
    sizes = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(lazy(x), y)
        loss.backward()
        opt.step()
        loss.item()
        sizes.append(len(lx.debug.ir_nodes(list(lazy.parameters()))))
    assert sizes[0] < sizes[1] < sizes[2]
    assert _counter("ImpliedBarrier") == 0 and _counter("WideRead") == 0
    lx.sync()


def _momentum_sgd(dev):
    """A model on the device, SGD with momentum over it, and one batch."""
    _, lazy = _model_pair()
    opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    return lazy, opt, torch.randn(8, 12, device=dev), torch.randint(0, 3, (8,), device=dev)


def _train_step(model, opt, x, y) -> None:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def test_barrier_donates_like_sync(dev, implied_on):
    lazy, opt, x, y = _momentum_sgd(dev)
    for _ in range(3):
        _train_step(lazy, opt, x, y)
    report = lx.debug.donation_report()
    assert report.kind == "implied step barrier (optimizer.step)"
    assert report.donors >= 8   # the 4 parameters and their 4 momentum buffers, updated in place
    assert lx.debug.ir_text().strip() == "(nothing pending)"


def test_lx_sync_after_the_implied_barrier_walks_nothing(dev, implied_on):
    # mark_step() after optimizer.step(), as PyTorch/XLA loops write it: nothing was made or
    # written since the implied barrier, so the step barrier neither walks the live storages
    # nor runs a graph; the first write after it makes the next barrier look again.
    lazy, opt, x, y = _momentum_sgd(dev)
    for _ in range(3):
        _train_step(lazy, opt, x, y)
        skipped, collects = _counter("BarrierNothingPending"), _counter("GraphCollect")
        lx.sync()
        assert _counter("BarrierNothingPending") == skipped + 1
        assert _counter("GraphCollect") == collects
    weight = lazy[0].weight
    before = weight.detach().cpu()
    with torch.no_grad():
        weight.mul_(2)
    skipped = _counter("BarrierNothingPending")
    lx.sync()
    assert _counter("BarrierNothingPending") == skipped
    assert torch.equal(weight.detach().cpu(), before * 2)
    fresh = torch.ones(3, device=dev) * 3   # a new pending tensor, nothing written in place
    lx.sync()
    assert _counter("BarrierNothingPending") == skipped
    assert fresh.tolist() == [3.0, 3.0, 3.0]


def test_a_failed_barrier_leaves_the_next_one_looking(dev, implied_on, monkeypatch):
    # the graph raised: its roots stay pending, and the next barrier must run them
    import importlib
    api = importlib.import_module("lazyxla.sync.api")
    w = torch.ones(3, device=dev)
    lx.sync()
    w.add_(1)

    def fails(request):
        raise RuntimeError("injected")
    with monkeypatch.context() as patch:
        patch.setattr(api, "run_graph", fails)
        with pytest.raises(RuntimeError, match="injected"):
            lx.sync()
    skipped = _counter("BarrierNothingPending")
    lx.sync()
    assert _counter("BarrierNothingPending") == skipped
    assert w.tolist() == [2.0, 2.0, 2.0]


def test_each_implied_barrier_names_what_ended_the_step(dev, implied_on):
    # the sync's kind is passed through: a compiled optimizer step's barrier is not labelled
    # optimizer.step's in the donation report, the error notes or the timeline
    from lazyxla.sync.api import compiled_update_done
    w = torch.ones(3).to(dev)
    w.add_(1)
    compiled_update_done()
    assert lx.debug.donation_report().kind == "implied step barrier (compiled optimizer step)"
    assert lx.debug.implied_barriers()[-1].reason == "compiled optimizer step"
    assert w.tolist() == [2.0, 2.0, 2.0]


def test_cpu_optimizer_places_no_barrier(implied_on):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    assert _counter("ImpliedBarrier") == 0


def test_inside_captured_function_no_barrier(dev, implied_on):
    """An optimizer step inside lx.experimental.gradient_accumulation's body would be a
    barrier inside a captured program: it places none (the capture is one graph)."""
    from lazyxla.sync.api import optimizer_stepped
    STATE.captures += 1
    try:
        lazy = torch.nn.Linear(3, 2).to(dev)
        opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
        optimizer_stepped(opt)
    finally:
        STATE.captures -= 1
    assert _counter("ImpliedBarrier") == 0


def test_graph_size_cap_warns_once_then_cuts(dev, monkeypatch):
    from lazyxla.sync import barriers
    monkeypatch.setattr(config, "SETTINGS", dataclasses.replace(config.SETTINGS, graph_op_limit=50))
    monkeypatch.setattr(STATE, "size_warning_given", False)
    x = torch.zeros(4, device=dev)
    with pytest.warns(UserWarning, match="ops were traced without a step barrier"):
        for _ in range(60):
            x = x + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(60):
            x = x + 1
    assert _counter("GraphSizeCut") == 2 and _counter("ImpliedBarrier") == 2
    assert lx.debug.implied_barriers()[-1].reason.startswith("graph size cap")
    assert x.cpu().tolist() == [120.0] * 4
