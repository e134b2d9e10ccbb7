"""Capture once, replay as one CALL node (capture/function.py): the shared mechanism of
compiled functions and gradient accumulation. Values against eager; counters for
traced ops, compiles and donors."""
import pytest
import torch

import lazyxla as lx
from lazyxla.capture import CaptureError, capture
from helpers import assert_close, counter, materialised, rand


def _mlp(x, w):
    return [torch.relu(x @ w) * 0.5 + 1.0]


def test_replay_matches_eager_without_tracing(dev, fresh_compile_cache, checked_ir):
    x, w = rand(4, 3), rand(3, 5)
    wd = w.to(dev)
    cap = capture(_mlp, [x.to(dev), wd], name="mlp")
    xs = [rand(4, 3, seed=step) for step in range(3)]
    xds = [xi.to(dev) for xi in xs]
    lx.sync()
    lx.metrics.clear_all()
    outs = []
    for xd in xds:
        outs += cap([xd, wd])
        lx.sync()
    assert counter("TracedOps") == 0          # no ATen op dispatched on replay
    assert counter("UncachedCompile") == 1    # three steps, one executable
    for xi, out in zip(xs, outs):
        assert_close(out, _mlp(xi, w)[0])


def test_fuses_with_surrounding_ops_into_one_graph(dev, fresh_compile_cache):
    x, w = rand(4, 3), rand(3, 5)
    cap = capture(_mlp, [x.to(dev), w.to(dev)], name="mlp")
    lx.sync()
    lx.metrics.clear_all()
    xd = x.to(dev)
    (out,) = cap([xd * 2, w.to(dev)])
    total = (out - 1).sum()
    assert_close(total, (_mlp(x * 2, w)[0] - 1).sum())
    assert counter("UncachedCompile") == 1


def test_mutated_input_is_returned_and_written_back_donates(dev, fresh_compile_cache):
    def step(p, g):
        p.sub_(g * 0.1)
        return [p.sum()]

    p0, g = rand(8), rand(8)
    (p, gd) = materialised(dev, p0, g)
    cap = capture(step, [p, gd], name="sgd")
    assert cap.mutated == [0] and cap.n_results == 1
    lx.sync()
    lx.metrics.clear_all()
    for _ in range(2):
        total, new_p = cap([p, gd])
        p.copy_(new_p)   # the caller writes the mutation back: p is updated in place
        lx.sync()
        report = lx.debug.donation_report()
        assert report.donors == 1 and report.donated_bytes == 8 * 4   # p's old buffer
    expected = p0 - 0.2 * g
    assert_close(p, expected)


def test_closure_over_a_weight_sees_its_later_updates(dev):
    w = rand(3, 3).to(dev)
    lx.sync()
    cap = capture(lambda x: [x @ w], [rand(2, 3).to(dev)], name="closure")
    w.mul_(2)
    lx.sync()
    x = rand(2, 3, seed=1)
    (out,) = cap([x.to(dev)])
    assert_close(out, x @ (w.cpu()))


def test_reading_outer_pending_computation_is_refused(dev):
    pending = rand(3).to(dev) + 1
    with pytest.raises(CaptureError, match="pending computation"):
        capture(lambda x: [x + pending], [rand(3).to(dev)], name="bad")


def test_writing_an_outer_tensor_is_refused_and_undone(dev):
    outer = rand(3).to(dev)
    lx.sync()
    before = outer.cpu().clone()

    def bad(x):
        outer.add_(x)
        return [x * 1]

    with pytest.raises(CaptureError, match="wrote into 1 tensor"):
        capture(bad, [rand(3).to(dev)], name="bad")
    assert_close(outer, before)
    lx.sync()


def test_host_read_inside_is_refused(dev):
    with pytest.raises(CaptureError, match="read on the host"):
        capture(lambda x: [x * float(x.sum())], [rand(3).to(dev)], name="bad")
    lx.sync()   # nothing left behind breaks later barriers


def test_escaped_values_fail_clearly(dev):
    leaked = []

    def leaky(x):
        leaked.append(x * 3)
        return [x + 1]

    capture(leaky, [rand(3).to(dev)], name="leaky")
    lx.sync()   # the barrier skips the escaped value instead of failing
    with pytest.raises(lx.DonatedBufferError, match="captured function"):
        leaked[0].cpu()


def test_random_ops_draw_fresh_seeds_per_call(dev):
    cap = capture(lambda x: [x + torch.rand_like(x)], [torch.zeros(64).to(dev)], name="rng")
    z = torch.zeros(64).to(dev)
    a, = cap([z])
    b, = cap([z])
    a, b = a.cpu(), b.cpu()
    assert not torch.equal(a, b)
    assert 0 <= float(a.min()) and float(a.max()) < 1


def test_autograd_inside_the_capture(dev):
    def loss_and_grad(x, w):
        loss = (x @ w).tanh().sum()
        loss.backward()
        return [loss.detach(), w.grad]

    x, w = rand(4, 3), rand(3, 2)
    cap = capture(loss_and_grad, [x.to(dev), w.to(dev)], name="grad", requires_grad=[False, True])
    loss, grad = cap([x.to(dev), w.to(dev)])
    wc = w.clone().requires_grad_()
    expected = (x @ wc).tanh().sum()
    expected.backward()
    assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-5)
    assert_close(grad, wc.grad, rtol=1e-5, atol=1e-5)


def test_graph_text_names_the_call(dev):
    cap = capture(_mlp, [rand(4, 3).to(dev), rand(3, 5).to(dev)], name="mlp")
    (out,) = cap([rand(4, 3).to(dev), rand(3, 5).to(dev)])
    assert "call[mlp]" in lx.debug.ir_text([out])


def test_a_value_returned_twice_gets_an_output_each(dev):
    # AOTAutograd's forward returns an activation and its detach(), and inputs as saved
    # values: several results over one node.
    def fn(x):
        y = x.relu()
        return [y, y.detach(), x, y]

    x0 = rand(5)
    cap = capture(fn, [x0.to(dev)], name="twice")
    outs = cap([(x0 * 2).to(dev)])
    assert len(outs) == 4
    assert_close(outs[0], (x0 * 2).relu())
    assert_close(outs[1], (x0 * 2).relu())
    assert_close(outs[2], x0 * 2)
    assert_close(outs[3], (x0 * 2).relu())
