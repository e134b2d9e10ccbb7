"""lx.experimental.while_loop / fori_loop and torch's while_loop on lazy tensors (issue #25):
values against the Python loop, one compiled loop whatever the trip count (no recompile
when only the data changes), closed-over weights re-read, random ops per iteration, and
the errors for what a device-side loop cannot do."""
from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop as torch_while_loop

import lazyxla as lx
from lazyxla import metrics
from lazyxla.experimental import WhileLoopError, fori_loop, scan, while_loop
from helpers import assert_close


def python_while(cond_fn, body_fn, carried):
    while cond_fn(*carried):
        carried = body_fn(*carried)
    return carried


def collatz_cond(n, steps):
    return n != 1


def collatz_body(n, steps):
    return torch.where(n % 2 == 0, n // 2, 3 * n + 1), steps + 1


def test_while_loop_matches_the_python_loop(dev):
    for start in (6, 27):
        n = torch.tensor(start)
        ref = python_while(collatz_cond, collatz_body, (n, torch.tensor(0)))
        metrics.clear_all()
        got = while_loop(collatz_cond, collatz_body, (n.to(dev), torch.tensor(0).to(dev)))
        assert isinstance(got, tuple) and len(got) == 2
        assert got[0].item() == 1 and got[1].item() == ref[1].item()
        # a data-dependent trip count, one program: the second start compiles nothing new
        if start == 27:
            assert (metrics.counter_value("UncachedCompile") or 0) == 0


def test_torch_while_loop_runs_on_lazy_tensors(dev):
    def cond_fn(i, x):
        return i > 0

    def body_fn(i, x):
        return i - 1, x * 2 + 1

    got = torch_while_loop(cond_fn, body_fn, (torch.tensor(5).to(dev), torch.ones(3).to(dev)))
    ref = python_while(cond_fn, body_fn, (torch.tensor(5), torch.ones(3)))
    assert_close(got[1], ref[1])


def test_closed_over_weights_are_read_at_each_call(dev):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    lazy = torch.nn.Linear(4, 4).to(dev)
    lazy.load_state_dict(lin.state_dict())
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(2):
            ref = x
            for _ in range(3):
                ref = torch.tanh(lin(ref))
            got = fori_loop(0, 3, lambda h: torch.tanh(lazy(h)), x.to(dev))
            assert_close(got, ref, rtol=1e-5, atol=1e-6)
            lin.weight.mul_(0.5)
            lazy.weight.mul_(0.5)
            lx.sync()


def test_fori_loop_bounds_and_several_values(dev):
    a, b = torch.ones(3).to(dev), torch.zeros(3).to(dev)
    got = fori_loop(torch.tensor(2).to(dev), torch.tensor(6).to(dev), lambda x, y: (x * 2, y + x), a, b)
    assert_close(got[0], torch.full((3,), 16.0))
    assert_close(got[1], torch.full((3,), 15.0))
    # no iteration when upper <= lower
    assert_close(fori_loop(5, 2, lambda x: x + 1, a), torch.ones(3))


def test_random_ops_differ_per_iteration(dev):
    def body(i, acc):
        r = torch.rand(1000, device=acc.device)
        return i + 1, torch.cat([acc[1:], r.mean().reshape(1)])

    _, got = while_loop(lambda i, acc: i < 4, body, (torch.tensor(0).to(dev), torch.zeros(4).to(dev)))
    means = got.cpu()
    assert len(set(means.tolist())) == 4
    assert ((means > 0.4) & (means < 0.6)).all()


# -- what a device-side loop refuses -------------------------------------------------

def test_grad_through_the_loop_is_refused(dev):
    w = torch.nn.Parameter(torch.randn(3).to(dev))
    with pytest.raises(WhileLoopError, match="no backward.*torch.no_grad.*scan"):
        fori_loop(0, 3, lambda x: x * w, torch.ones(3).to(dev))
    with pytest.raises(WhileLoopError, match="no backward"):
        fori_loop(0, 3, lambda x: x * 2, torch.ones(3).to(dev).requires_grad_())
    with torch.no_grad():
        assert_close(fori_loop(0, 2, lambda x: x * w, torch.ones(3).to(dev)), (w * w).cpu())


def test_host_read_inside_the_loop_is_refused(dev):
    def body(i, x):
        if x.sum().item() > 0:
            return i - 1, x + 1
        return i - 1, x
    with pytest.raises(RuntimeError, match="read on the host.*while_loop traces"):
        while_loop(lambda i, x: i > 0, body, (torch.tensor(3).to(dev), torch.ones(2).to(dev)))
    assert_close(torch.ones(2).to(dev) * 2, torch.full((2,), 2.0))


def test_bad_input(dev):
    i, x = torch.tensor(3).to(dev), torch.ones(2).to(dev)
    with pytest.raises(WhileLoopError, match="keep its shape and dtype"):
        while_loop(lambda i, x: i > 0, lambda i, x: (i - 1, x.sum()), (i, x))
    with pytest.raises(WhileLoopError, match="one value per carried input"):
        while_loop(lambda i, x: i > 0, lambda i, x: (i - 1,), (i, x))
    with pytest.raises(WhileLoopError, match="0-d bool tensor"):
        while_loop(lambda i, x: i, lambda i, x: (i - 1, x), (i, x))
    with pytest.raises(WhileLoopError, match="must be a lazyxla tensor"):
        while_loop(lambda i, x: i > 0, lambda i, x: (i - 1, x), (i, torch.ones(2)))
    with pytest.raises(WhileLoopError, match="ints or 0-d integer"):
        fori_loop(0.0, 3, lambda x: x, x)


def test_loop_inside_a_scan_body(dev):
    """fori_loop in scan's fn reads the scan's per-iteration slice (an input of the
    enclosing capture) as an operand."""
    def fn(c, x):
        return fori_loop(0, 3, lambda h: h * 0.5 + x, c), None

    xs = torch.randn(4, 3)
    with torch.no_grad():
        got, _ = scan(fn, torch.zeros(3).to(dev), xs.to(dev))
    ref = torch.zeros(3)
    for x in xs:
        for _ in range(3):
            ref = ref * 0.5 + x
    assert_close(got, ref)
