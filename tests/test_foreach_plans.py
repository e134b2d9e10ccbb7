"""`torch._foreach_*` calls against eager CPU, and their cached plans (frontend/foreach_plans.py).

A foreach call whose signature (element metadata, scalar kinds, constants) was met twice
replays a plan instead of tracing each element through its single-tensor handler
(`ForeachPlanReused`); the values, the graph (no compile after warm-up) and the errors stay
those of the element path.
"""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from lazyxla import metrics
from lazyxla.frontend import foreach_plans

from helpers import assert_close

SHAPES = [(3,), (2, 4), (5, 1, 2), ()]


def _lists(seed: int, k: int = 3, shapes=SHAPES) -> list:
    g = torch.Generator().manual_seed(seed)
    return [[torch.rand(s, generator=g) + 0.5 for s in shapes] for _ in range(k)]


def _optimizer_like(a, b, c, scalar):
    """The overloads SGD, Adam and AdamW (foreach=True) call, in place and not."""
    torch._foreach_mul_(a, 0.9)                                    # Scalar
    torch._foreach_add_(a, b, alpha=0.3)                           # List, a kwarg
    torch._foreach_lerp_(b, c, 0.1)                                # Scalar weight
    torch._foreach_addcmul_(c, a, b, 0.01)                         # Scalar value (positional)
    torch._foreach_addcmul_(c, a, b, value=0.02)                   # ... as a kwarg
    denom = torch._foreach_sqrt(c)                                 # out of place
    torch._foreach_div_(denom, [1.0 + i for i in range(len(a))])   # ScalarList
    torch._foreach_add_(denom, 1e-8)
    torch._foreach_addcdiv_(a, b, denom, [-0.1 * (i + 1) for i in range(len(a))])   # ScalarList
    torch._foreach_mul_(b, scalar)                                 # Tensor (a 0-d tensor)
    torch._foreach_maximum_(c, denom)                              # copied back into self
    return [torch._foreach_sub(a, b), torch._foreach_norm(c), denom]


def _run(fn, cpu_lists, dev, steps: int, extra=()):
    """`fn` on eager CPU and on lazyxla for `steps` steps; per lazy step the ForeachPlanReused
    and UncachedCompile counters."""
    lazy_lists = [[t.to(dev) for t in ts] for ts in cpu_lists]
    lazy_extra = [e.to(dev) for e in extra]
    lx.sync()
    counts = []
    for _ in range(steps):
        expected = fn(*cpu_lists, *extra)
        metrics.clear_counters()
        got = fn(*lazy_lists, *lazy_extra)
        lx.sync()
        counts.append((metrics.counter_value("ForeachPlanReused") or 0, metrics.counter_value("UncachedCompile") or 0))
        for e, g in zip(expected, got):
            assert_close(g, e)
        for e, g in zip(cpu_lists, lazy_lists):
            assert_close(g, e)
    return counts


def test_optimizer_overloads_match_eager_and_replay_after_two_steps(dev, fresh_compile_cache):
    counts = _run(_optimizer_like, _lists(0), dev, 5, extra=(torch.tensor(0.7),))
    # step 0 meets each signature, step 1 plans it (and compiles nothing new), then 13 replays
    print(counts)
    assert counts[0][0] == 0 and counts[1] == (2, 0)   # the two addcmul_ calls share a signature
    assert counts[2:] == [(13, 0)] * 3


OVERLOADS = {
    "unary": lambda a, b, c: [torch._foreach_exp(a), torch._foreach_neg(b), torch._foreach_abs(c)],
    "unary_": lambda a, b, c: [torch._foreach_reciprocal_(a), torch._foreach_zero_(c)] and [],
    "sub_alpha": lambda a, b, c: [torch._foreach_sub(a, b, alpha=0.5), torch._foreach_sub_(c, a, alpha=2)] and [],
    "div_tensor": lambda a, b, c: [torch._foreach_div(a, b[1].sum()), torch._foreach_mul(c, [t + 1 for t in b])],
    "scalarlist_out": lambda a, b, c: [torch._foreach_add(a, [0.5 * i for i in range(len(a))]),
                                       torch._foreach_mul(b, [2] * len(b))],
    "pointwise": lambda a, b, c: [torch._foreach_addcdiv(a, b, c, 0.3), torch._foreach_addcmul(a, b, c, [0.1, 0.2, 0.3, 0.4])],
    "lerp_list": lambda a, b, c: [torch._foreach_lerp_(a, b, c)] and [],
    "pow": lambda a, b, c: [torch._foreach_pow(a, 2.0), torch._foreach_pow(0.9, b), torch._foreach_pow(a, b),
                            torch._foreach_pow(c, [1.5, 2.0, 3, 0.5]), torch._foreach_pow_(c, 0.5)][:4],
    "clamp": lambda a, b, c: [torch._foreach_clamp_min_(a, 0.7), torch._foreach_clamp_max(b, 0.9),
                              torch._foreach_clamp_min(c, [0.6, 0.7, 0.8, 0.9])][1:],
    "minimum": lambda a, b, c: [torch._foreach_minimum_(a, b), torch._foreach_maximum_(c, [0.6, 0.7, 0.8, 0.9]),
                                torch._foreach_maximum(b, 0.8), torch._foreach_minimum(b, 0.7)][2:],
    "norm": lambda a, b, c: [torch._foreach_norm(a), torch._foreach_norm(b, 1)],
}


@pytest.mark.parametrize("name", sorted(OVERLOADS))
def test_overloads_match_eager_on_both_paths(name, dev):
    fn = OVERLOADS[name]
    counts = _run(fn, _lists(7, shapes=[(2, 3), (4,), (1, 2, 2), (3,)]), dev, 4)
    assert counts[0][0] == 0 and counts[3][0] == counts[2][0] > 0


def test_out_overloads_fill_out_and_return_nothing(dev):
    a = [torch.rand(3) - 0.5, torch.rand(2, 2) - 0.5]
    lazy, out = [t.to(dev) for t in a], [torch.empty(3).to(dev), torch.empty(2, 2).to(dev)]
    assert torch.ops.aten._foreach_abs.out(lazy, out=out) is None
    for e, g in zip(a, out):
        assert_close(g, e.abs())


def test_an_overload_without_a_single_tensor_op_says_so(dev):
    """addcdiv_ takes a number per element; its foreach Tensor overload (a tensor of them) is refused."""
    a = [torch.ones(3).to(dev), torch.ones(2).to(dev)]
    with pytest.raises(NotImplementedError, match="is not supported: no single-tensor op takes one element"):
        torch._foreach_addcdiv_(a, a, a, torch.tensor([0.5, 2.0]).to(dev))


def test_replayed_nodes_are_the_element_paths(dev):
    """The same nodes: a graph traced by replays has the key of one traced element by element."""
    from lazyxla.sync.api import pending_graphs
    lists = _lists(1)
    lazy = [[t.to(dev) for t in ts] for ts in lists]
    lx.sync()
    keys = []
    for _ in range(3):
        _optimizer_like(*lazy, torch.tensor(0.5).to(dev))
        (graph, _), = pending_graphs()
        keys.append(graph.key)
        lx.sync()
    assert keys[2] == keys[1] == keys[0]


def test_views_aliases_and_read_after_write(dev):
    """Elements that are views of one base, the same tensor twice, and an element reading
    what an earlier element of the same call wrote: eager's per-element order."""
    def fn(base, other):
        views = [base[0], base[1:3], base.t()[1], base[3, ::2]]   # base.t()[1] overlaps base[1:3]
        torch._foreach_add_(views, [v * 0 + 1 for v in [other[0], other[1:3], other.t()[1], other[3, ::2]]],
                            alpha=0.5)
        torch._foreach_mul_([views[0], views[2], views[0]], 2.0)      # views[0] twice
        # element 0 writes row 1, which element 1 (column 1) reads and writes
        torch._foreach_addcmul_([views[1][0], views[2]], [views[2], views[1][1]], [views[1][1], views[2]], 0.25)
        return [torch._foreach_exp(views)]

    base, other = torch.rand(4, 4), torch.rand(4, 4)
    lazy_base, lazy_other = base.to(dev), other.to(dev)
    for step in range(4):
        expected = fn(base, other)
        metrics.clear_counters()
        got = fn(lazy_base, lazy_other)
        lx.sync()
        assert_close(lazy_base, base)
        for e, g in zip(expected[0], got[0]):
            assert_close(g, e)
        if step >= 2:
            assert metrics.counter_value("ForeachPlanReused") == 4


def test_a_new_shape_or_scalar_kind_misses_and_computes_right(dev):
    def fn(a, b):
        torch._foreach_add_(a, b, alpha=2)
        torch._foreach_mul_(a, 0.5)
        return []

    _run(fn, _lists(2, 2), dev, 3)
    metrics.clear_counters()
    counts = _run(fn, _lists(3, 2, shapes=[(3,), (2, 5)]), dev, 1)   # another shape
    assert counts == [(0, counts[0][1])]
    # an int alpha planned at its second call; a float one is another signature
    a, b = _lists(4, 2, shapes=[(6,), (2, 3)])
    lazy_a, lazy_b = [t.to(dev) for t in a], [t.to(dev) for t in b]
    reused = []
    for alpha in (2, 3, 4, 0.25):
        torch._foreach_add_(a, b, alpha=alpha)
        metrics.clear_counters()
        torch._foreach_add_(lazy_a, lazy_b, alpha=alpha)
        reused.append(metrics.counter_value("ForeachPlanReused"))
        lx.sync()
        for e, g in zip(a, lazy_a):
            assert_close(g, e)
    assert reused == [None, None, 1, None]


def test_a_changed_dtype_still_raises_eagers_error(dev):
    ints = [torch.arange(3).to(dev), torch.arange(4).to(dev)]
    for _ in range(3):
        torch._foreach_add_(ints, 1)
    with pytest.raises(RuntimeError):   # as eager: an int tensor cannot take a float in place
        torch._foreach_add_(ints, 1.5)
    assert [t.cpu().tolist() for t in ints] == [[3, 4, 5], [3, 4, 5, 6]]


def test_a_donated_tensor_in_a_replayed_call_raises(dev):
    a = [torch.rand(4).to(dev), torch.rand(2, 2).to(dev)]
    spare = torch.rand(2, 2).to(dev)
    for _ in range(3):
        torch._foreach_mul_([a[0], spare], 2.0)
        lx.sync()
    donor = torch.rand(2, 2).to(dev)
    assert lx.set_buffer_donation(donor)
    out = donor * 2
    lx.sync()
    assert lx.is_donated(donor)
    metrics.clear_counters()
    with pytest.raises(lx.DonatedBufferError, match="donated"):
        torch._foreach_mul_([a[0], donor], 2.0)
    assert metrics.counter_value("ForeachPlanReused") == 1   # the replay raised, as the element path does
    assert out.cpu().shape == (2, 2)


def test_host_tensors_in_a_planned_signature_still_raise(dev):
    a = [torch.rand(3).to(dev), torch.rand(2).to(dev)]
    b = [torch.rand(3).to(dev), torch.rand(2).to(dev)]
    for _ in range(3):
        torch._foreach_add_(a, b)
    with pytest.raises(RuntimeError, match="lazyxla device"):
        torch._foreach_add_(a, [torch.rand(3), torch.rand(2)])


def test_a_signature_the_element_path_converts_otherwise_is_never_planned(dev, monkeypatch):
    """The plan is checked against the element path's own conversion: where the key's kinds
    disagree with it (here: ints taken for constants, which convert lifts), no plan."""
    monkeypatch.setattr(foreach_plans, "_SCALAR_TYPES", (float,))
    ts = [torch.ones(5).to(dev), torch.ones(1, 5).to(dev)]
    metrics.clear_counters()
    for _ in range(4):
        torch._foreach_mul_(ts, 3)
    assert metrics.counter_value("ForeachPlanBuilt") is None and metrics.counter_value("ForeachPlanReused") is None
    assert [t.cpu().tolist() for t in ts] == [[81.0] * 5, [[81.0] * 5]]


def test_plans_are_bounded(dev, monkeypatch):
    table = foreach_plans.BoundedTable(4)
    monkeypatch.setattr(foreach_plans, "PLANS", table)
    monkeypatch.setattr(foreach_plans, "_MET", foreach_plans.BoundedTable(4))
    for n in range(1, 8):
        ts = [torch.ones(n).to(dev)]
        for _ in range(3):
            torch._foreach_mul_(ts, 2.0)
        assert ts[0].cpu().tolist() == [8.0] * n
    assert 0 < len(table) <= 4


_TWO_DEVICES = """
import torch, lazyxla as lx
from lazyxla import metrics
d0, d1 = lx.device(0), lx.device(1)
a = [torch.ones(3).to(d0), torch.ones(2).to(d1)]          # one list over two devices
b = [torch.full((3,), 2.0).to(d0), torch.full((2,), 3.0).to(d1)]
for _ in range(3):
    torch._foreach_add_(a, b)
    outs = torch._foreach_mul(a, b)
assert metrics.counter_value("ForeachPlanReused") == 2
assert [o.device for o in outs] == [d0, d1], outs
assert a[0].tolist() == [7.0] * 3 and a[1].tolist() == [10.0] * 2 and outs[1].tolist() == [30.0] * 2
mixed = [torch.ones(3).to(d0), torch.ones(2).to(d0)]       # the planned shapes, element 1 on two devices
try:
    torch._foreach_add_(mixed, b)
except RuntimeError as e:
    assert "lazyxla:0" in str(e) and "lazyxla:1" in str(e), e
else:
    raise AssertionError("mixing devices within an element must fail")
assert metrics.counter_value("ForeachPlanReused") == 3
assert mixed[0].tolist() == [3.0] * 3   # element 0 ran first, as on the element path
print("ok")
"""


def test_two_devices_keep_each_elements_device_and_refuse_a_mixed_element():
    from helpers import run_on_host_devices
    out = run_on_host_devices(_TWO_DEVICES, devices=2, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
