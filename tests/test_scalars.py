"""Lifted scalars: shared by Python object, passed separately or packed.

See lazyxla/frontend/tracing.py (lift_scalar) and lazyxla/ir/scalars.py
(SEPARATE_SCALARS_MAX) for why."""
from __future__ import annotations

import torch

import lazyxla as lx
from lazyxla import metrics
from lazyxla.ir import scalars
from lazyxla.sync.api import pending_graphs

from helpers import assert_close, skip_if_narrowed


def _scalar_values(graph) -> list:
    return sorted(s.data for s in graph.scalars)


def test_a_foreach_scalar_is_one_operand_for_the_whole_list(dev):
    ts = [torch.ones(3).to(dev) for _ in range(4)]
    lx.sync()
    torch._foreach_mul_(ts, 2.5)
    torch._foreach_add_(ts, ts, alpha=0.125)
    (graph, _), = pending_graphs()
    assert _scalar_values(graph) == [0.125, 2.5]
    lx.sync()
    assert [t.cpu().tolist() for t in ts] == [[2.8125] * 3] * 4


def test_equal_values_from_different_objects_stay_apart(dev):
    a = torch.ones(3).to(dev)
    lx.sync()
    x, y = float("0.5"), float("0.5")   # equal, distinct objects
    assert x is not y
    a.mul_(x).mul_(y)
    (graph, _), = pending_graphs()
    assert _scalar_values(graph) == [0.5, 0.5]


def test_shared_scalars_keep_steps_on_one_executable(dev):
    w = torch.ones(4).to(dev)
    lx.sync()
    beta = 0.9

    def step():
        torch._foreach_mul_([w], beta)
        torch._foreach_add_([w], [torch.ones(4).to(dev)], alpha=beta)
        lx.sync()

    step()
    step()
    metrics.clear_all()
    for _ in range(3):
        step()
    assert metrics.counter_value("UncachedCompile") in (None, 0)
    expected = torch.ones(4)
    for _ in range(5):
        expected = expected * 0.9 + 0.9
    assert_close(w, expected)


def test_many_scalars_travel_packed_and_compute_the_same(dev):
    skip_if_narrowed(torch.float64, torch.int64)   # the 64-bit travel format
    n = scalars.SEPARATE_SCALARS_MAX + 44
    coeffs = [1.0 + i * 1e-3 for i in range(n)]
    x = torch.randn(8, 8)
    t, ref = x.to(dev), x.clone()
    for c in coeffs:
        t = t * c + 1
        ref = ref * c + 1
    (graph, _), = pending_graphs()
    assert len(graph.scalars) > scalars.SEPARATE_SCALARS_MAX
    # one vector per kind present: float64 (the coefficients), int64 (the 1)
    assert scalars.scalar_avals(graph) == [((n,), scalars.SCALAR_DTYPES[0]), ((1,), scalars.SCALAR_DTYPES[1])]
    assert_close(t, ref, rtol=1e-4)


def test_few_scalars_travel_as_separate_operands(dev):
    skip_if_narrowed(torch.float64, torch.int64)   # the 64-bit travel format
    t = torch.ones(3).to(dev)
    lx.sync()
    t = t * 0.5 + 2
    (graph, _), = pending_graphs()
    assert scalars.scalar_avals(graph) == [((), scalars.SCALAR_DTYPES[0]), ((), scalars.SCALAR_DTYPES[1])]
    assert t.cpu().tolist() == [2.5] * 3


def test_scalars_pack_only_for_long_chains(dev, monkeypatch):
    """Packed scalars make every fusion that reads one a different kernel: an
    optimizer-like graph (one small update per output, each with its own scalar)
    keeps them separate; a long chain with few outputs packs them (ir/scalars.py).
    Under a backend that does not pack every graph's scalars (CPU's; a TPU's packs them)."""
    from lazyxla.runtime import backend
    monkeypatch.setattr(backend.current(), "pack_scalars", False)
    n = scalars.SEPARATE_SCALARS_MAX + 44
    ts = [torch.ones(4).to(dev) for _ in range(n)]
    lx.sync()
    for i, t in enumerate(ts):
        t.mul_(i + 0.5)             # a float object of its own per call: n lifted scalars
    (graph, _), = pending_graphs()
    assert len(graph.scalars) == n and len(graph.outputs) == n
    assert len(scalars.scalar_avals(graph)) == n          # one 0-d operand each
    lx.sync()
    assert ts[3].cpu().tolist() == [3.5] * 4

    x = ts[0]
    for i in range(n):
        x = x + (i + 0.25)
    (graph, _), = pending_graphs()
    assert len(graph.outputs) == 1
    assert [shape for shape, _ in scalars.scalar_avals(graph)] == [(n,)]   # one vector per kind present
    assert_close(x, torch.full((4,), 0.5 + sum(i + 0.25 for i in range(n))))


def test_long_chains_merge_equal_scalars(dev):
    """W4's kind of graph, a long chain of fresh literals: at a sync equal values share
    one operand (sync/collect.py), -0.0 and 0.0 stay apart, and a chain whose values
    start or stop being equal compiles once per pattern, with the right values."""
    n = scalars.SEPARATE_SCALARS_MAX
    x = torch.full((4,), 0.5)
    xl = x.to(dev)
    lx.sync()

    def chain(y, a, b):
        for _ in range(n):
            y = y * (a * 1.0) + (b * 1.0)   # new float objects per op: 2n lifted scalars
        return y

    compiles = []
    for a, b in ((0.5, 0.25), (0.5, 0.5), (0.75, 0.125), (-0.0, 0.0)):
        y = chain(xl, a, b)
        (graph, _), = pending_graphs()
        assert len(graph.scalars) == len({(a, str(a)), (b, str(b))}), graph.scalars   # -0.0 != 0.0 here
        metrics.clear_all()
        assert_close(y, chain(x, a, b))
        compiles.append(metrics.counter_value("UncachedCompile") or 0)
    # two distinct values share the first executable; (0.5, 0.5), one value, is a new pattern
    assert compiles == [1, 1, 0, 0], compiles
