"""torch.optim on lazy parameters, value by value against eager CPU."""
import copy

import pytest
import torch

import lazyxla as lx
from lazyxla import metrics
from helpers import assert_close

OPTIMIZERS = {
    "sgd": lambda p, fe: torch.optim.SGD(p, lr=0.05, foreach=fe),
    "sgd_momentum_wd": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2, foreach=fe),
    "sgd_nesterov": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, foreach=fe),
    "adam": lambda p, fe: torch.optim.Adam(p, lr=1e-2, foreach=fe),
    "adam_wd_amsgrad": lambda p, fe: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-3, amsgrad=True, foreach=fe),
    "adamw": lambda p, fe: torch.optim.AdamW(p, lr=1e-2, foreach=fe),
    "rmsprop": lambda p, fe: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, foreach=fe),
}


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _train(model, opt, x, y, steps, sched=None, sync=None):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if sync:
            sync()
        losses.append(loss)
    return [float(loss.item()) for loss in losses]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("foreach", [None, False])
def test_optimizer_matches_eager(name, foreach, dev, checked_ir):
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    ref = _model()
    lazy = copy.deepcopy(ref).to(dev)
    exp = _train(ref, OPTIMIZERS[name](ref.parameters(), foreach), x, y, 4)
    got = _train(lazy, OPTIMIZERS[name](lazy.parameters(), foreach), x.to(dev), y.to(dev), 4, sync=lx.sync)
    assert_close(torch.tensor(got), torch.tensor(exp), rtol=1e-4, atol=1e-5)
    for pr, pl in zip(ref.parameters(), lazy.parameters()):
        assert_close(pl.detach(), pr.detach(), rtol=1e-4, atol=1e-5)


def test_foreach_is_the_default_on_lazy_parameters(dev):
    model = _model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 6).to(dev), torch.randn(8, 3).to(dev)
    _train(model, opt, x, y, 2, sync=lx.sync)
    metrics.clear_counters()
    _train(model, opt, x, y, 1, sync=lx.sync)
    default_ops = metrics.counter_value("TracedOps")
    opt_loop = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    _train(model, opt_loop, x, y, 2, sync=lx.sync)
    metrics.clear_counters()
    _train(model, opt_loop, x, y, 1, sync=lx.sync)
    # with foreach, the optimizer issues one dispatch per group op (plus per-element
    # nodes inside, counted too), never more than the per-parameter loop
    assert default_ops <= metrics.counter_value("TracedOps")
    assert opt.defaults["foreach"] is None


def test_lr_scheduler_changes_lr_without_recompiling(dev):
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    ref = _model()
    lazy = copy.deepcopy(ref).to(dev)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt_l = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    sched_r = torch.optim.lr_scheduler.StepLR(opt_r, 1, gamma=0.7)
    exp = _train(ref, opt_r, x, y, 6, sched_r)
    sched_l = torch.optim.lr_scheduler.StepLR(opt_l, 1, gamma=0.7)
    xd, yd = x.to(dev), y.to(dev)
    got = _train(lazy, opt_l, xd, yd, 2, sched_l, sync=lx.sync)  # warm-up: momentum buffers appear
    metrics.clear_all()
    got += _train(lazy, opt_l, xd, yd, 4, sched_l, sync=lx.sync)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp), rtol=1e-4, atol=1e-5)
    assert metrics.counter_value("UncachedCompile") is None  # the lr changed at every step


def test_foreach_shares_one_scalar_operand_across_the_list(dev):
    """A foreach op's scalar (lr, beta) is one runtime operand for the whole list,
    not one per tensor; per-tensor ScalarList values stay one each."""
    from lazyxla.sync.api import pending_graphs
    ts = [torch.ones(3).to(dev) + i for i in range(5)]
    lx.sync()
    torch._foreach_mul_(ts, 0.5)
    torch._foreach_add_(ts, [float(i) for i in range(5)])
    (graph, _), = pending_graphs()
    assert sorted(s.data for s in graph.scalars) == [0.0, 0.5, 1.0, 2.0, 3.0, 4.0]
    lx.sync()
    assert [t.cpu().tolist() for t in ts] == [[0.5 + 1.5 * i] * 3 for i in range(5)]


def test_shared_scalars_keep_the_graph_key_across_values(dev):
    """Sharing follows the Python object, never equal values, so a new lr does not recompile."""
    ts = [torch.ones(4).to(dev) for _ in range(3)]
    lx.sync()
    for lr in (0.1, 0.2, 0.3):
        torch._foreach_add_(ts, ts, alpha=lr)
        lx.sync()
    metrics.clear_all()
    torch._foreach_add_(ts, ts, alpha=0.4)
    lx.sync()
    assert metrics.counter_value("UncachedCompile") in (None, 0)
    assert ts[0].cpu().tolist() == pytest.approx([1.1 * 1.2 * 1.3 * 1.4] * 4)


@pytest.mark.parametrize("name", ["adamw", "adam_wd_amsgrad", "adagrad"])
def test_state_created_in_step_zero_does_not_cost_a_second_compile(name, dev, fresh_compile_cache):
    """Optimizer state made inside the first step is materialised at once, so step 0
    runs the same graph as every later step: one compile for the whole warm-up."""
    make = OPTIMIZERS.get(name) or (lambda p, fe: torch.optim.Adagrad(p, lr=1e-2, foreach=fe))
    model = _model().to(dev)
    opt = make(model.parameters(), None)
    x, y = torch.randn(8, 6).to(dev), torch.randn(8, 3).to(dev)
    lx.sync()
    metrics.clear_all()
    _train(model, opt, x, y, 4, sync=lx.sync)
    assert metrics.counter_value("UncachedCompile") == 1
    ref = _model()
    ref_opt = make(ref.parameters(), None)
    _train(ref, ref_opt, x.cpu(), y.cpu(), 4)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)


def test_fill_factories_stay_lazy_outside_an_optimizer_step(dev):
    from lazyxla.ir.node import DATA
    p = torch.randn(4, 3).to(dev)
    lx.sync()
    z = torch.zeros_like(p)
    assert z._st.value.op is not DATA        # a constant in the next graph, not an upload
    assert z.cpu().tolist() == [[0.0] * 3] * 4


def test_a_step_that_raises_leaves_no_open_state_window(dev):
    from lazyxla.frontend.optim import in_optimizer_step
    p = torch.nn.Parameter(torch.randn(3).to(dev))
    opt = torch.optim.Adam([p], lr=0.1)

    def failing_closure():
        raise RuntimeError("boom")

    p.grad = torch.ones(3).to(dev)
    with pytest.raises(RuntimeError, match="boom"):
        opt.step(failing_closure)
    assert in_optimizer_step()               # torch skips the post hook on an exception
    lx.sync()
    assert not in_optimizer_step()
