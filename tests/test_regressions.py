"""Minimal regressions for bugs found by the differential tester (tests/test_differential.py)."""
from __future__ import annotations

import dataclasses
import pytest
import torch

import lazyxla as lx
from lazyxla import config


def _donated_pair(dev):
    """(a, consumer): a was marked and donated by a step barrier that computed consumer."""
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(dev)
    assert lx.set_buffer_donation(a)
    consumer = a * 2
    lx.sync()
    assert lx.is_donated(a)
    return a, consumer


def test_view_of_donated_tensor_raises_at_use_and_later_syncs_work(dev):
    # Bug: a view created before the donation kept a cached node over the dead buffer;
    # `v + 1` traced fine and every later lx.sync() raised DonatedBufferError.
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(dev)
    v = a[1]
    assert lx.set_buffer_donation(a)
    consumer = a * 2
    lx.sync()
    assert lx.is_donated(v)
    with pytest.raises(lx.DonatedBufferError):
        v + 1
    with pytest.raises(lx.DonatedBufferError):
        v.cpu()
    b = torch.ones(3, device=dev)
    lx.sync()
    assert b.tolist() == [1.0, 1.0, 1.0]
    assert consumer[2, 3].item() == 22.0


@pytest.mark.parametrize("write", ["copy_host", "copy_lazy", "fill_", "setitem", "view_add_"])
def test_write_into_donated_tensor_raises_and_does_not_revive_it(dev, write):
    # Bug: a.copy_(src) into a donated tensor replaced its value and revived it; a write
    # through a view scattered into the dead buffer and broke the next sync.
    a, _ = _donated_pair(dev)
    with pytest.raises(lx.DonatedBufferError):
        if write == "copy_host":
            a.copy_(torch.zeros(3, 4))
        elif write == "copy_lazy":
            a.copy_(torch.zeros(3, 4, device=dev))
        elif write == "fill_":
            a.fill_(0)
        elif write == "setitem":
            a[1:2] = 5.0
        else:
            a[0].add_(1)
    assert lx.is_donated(a)
    b = torch.ones(2, device=dev) * 3
    lx.sync()
    assert b.tolist() == [3.0, 3.0]


def test_copy_of_marked_tensor_is_not_donated(dev):
    # Bug: b.copy_(a) installs a's buffer into b; after a.add_(1) the buffer was both an
    # automatic and an explicit donor, and the holder check was skipped: b (never
    # marked) was invalidated by the step barrier.
    a = torch.ones(4).to(dev)
    assert lx.set_buffer_donation(a)
    b = torch.zeros(4, device=dev)
    b.copy_(a)
    a.add_(1)
    lx.sync()
    assert not lx.is_donated(b)
    assert b.tolist() == [1.0] * 4
    assert a.tolist() == [2.0] * 4


def test_copy_of_marked_tensor_survives_when_marker_dies(dev):
    a = torch.ones(4).to(dev)
    assert lx.set_buffer_donation(a)
    b = torch.zeros(4, device=dev)
    b.copy_(a)
    del a
    c = b * 2
    lx.sync()
    assert not lx.is_donated(b)
    assert b.tolist() == [1.0] * 4 and c.tolist() == [2.0] * 4


def test_host_read_of_marked_tensor_and_its_view_with_explicit_donation(dev):
    # Bug: reading [a, a.unsqueeze(0)] at once with explicit donation enabled ran a graph
    # for the view that donated a's marked buffer, then failed to download a itself.
    a = torch.tensor(3.0).to(dev)
    v = a.unsqueeze(0)
    assert lx.set_buffer_donation(a)
    from lazyxla.sync.api import host_values
    with lx.explicit_donation(True):
        ha, hv = host_values([a, v])
    assert ha.item() == 3.0 and hv.tolist() == [3.0]


@pytest.mark.parametrize("op", ["t_", "transpose_", "unsqueeze_", "squeeze_", "swapdims_", "set_"])
def test_inplace_view_ops_change_the_tensor_not_the_storage(dev, op):
    # Bug: x.t_() was traced as an ordinary in-place op: the transposed value was written
    # into the storage while x kept its old shape; the next sync failed with "lowering of
    # aten.mul.Tensor produced shape (4, 3), expected (3, 4)".
    def prog(base):
        x = base[1:] if op in ("squeeze_", "transpose_") else base
        if op == "t_":
            x.t_()
        elif op == "transpose_":
            x.transpose_(0, 1)
        elif op == "unsqueeze_":
            x.unsqueeze_(0)
        elif op == "squeeze_":
            x = base[:1]
            x.squeeze_(0)
        elif op == "swapdims_":
            x.swapdims_(0, 1)
        else:
            x.set_(base[1:])
        x[0].mul_(-1)  # writes through the new geometry
        return x * 1, base * 1

    host = torch.arange(12.0).reshape(3, 4)
    lazy = host.to(dev)
    want = prog(host)
    got = prog(lazy)
    lx.sync()
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g.cpu(), w)


def test_as_strided_on_a_view_reads_the_storage_or_refuses(dev):
    # as_strided addresses the storage; on a view the lowering read the view's own
    # values instead ([[5, 9], [6, 10]] where eager gives [[1, 5], [2, 6]]). It now runs
    # on the view's base when that is contiguous (#15: stft makes such views), and
    # refuses where the base's storage order is not its row-major order.
    host = torch.arange(12.0).reshape(3, 4)
    x = host.to(dev)
    for view in (lambda t: t, lambda t: t[1:], lambda t: t.t(), lambda t: t.view(12)[5:]):
        assert torch.equal(view(x).as_strided((2, 2), (1, 4), 1).cpu(), view(host).as_strided((2, 2), (1, 4), 1))
    y, hy = x.clone(), host.clone()
    for t in (y, hy):
        t[1:].as_strided((2,), (5,), 0).fill_(-1)  # writes reach the storage's elements
    assert torch.equal(y.cpu(), hy)
    transposed_base = x.t().clone()  # clone keeps the transposed strides
    assert transposed_base.stride() == (1, 4)
    with pytest.raises(NotImplementedError, match="as_strided"):
        transposed_base[1:].as_strided((2, 2), (1, 4), 1)


def test_graph_size_cut_never_donates_explicit_marks(dev, monkeypatch):
    # Bug: with explicit donation enabled, an automatic graph-size cut (a sync the user
    # did not ask for, run at the entry of an op) donated a marked buffer, and the very
    # op that triggered the cut, `-v0`, raised DonatedBufferError.
    lx.sync()
    monkeypatch.setattr(config, "SETTINGS", dataclasses.replace(config.SETTINGS, graph_op_limit=2))
    v0 = torch.tensor(3.0).to(dev)
    assert lx.set_buffer_donation(v0)
    lx.set_explicit_donation(True)
    v1 = v0 + 2
    v2 = -v0
    v3 = v0 * v1
    assert (lx.metrics.counter_value("GraphSizeCut") or 0) >= 1
    assert not lx.is_donated(v0)
    assert [v1.item(), v2.item(), v3.item()] == [5.0, -3.0, 15.0]


def _grad_of_sum(dev):
    x = torch.ones(4).to(dev).requires_grad_()
    return torch.autograd.grad(x.sum(), x)[0]  # an expand view (stride 0), as in eager


def test_write_through_expanded_view_refuses_instead_of_losing_the_write(dev):
    # Bug: g[2:3] = -3 on the (expanded) gradient of a sum: eager writes the one shared
    # element (all four read -3); lazyxla's scatter back through the expand kept a stale
    # element and the write was silently lost (all four read 1).
    g = _grad_of_sum(dev)
    assert g.stride() == (0,)
    with pytest.raises(NotImplementedError, match="expanded"):
        g[2:3] = -3.0
    with pytest.raises(NotImplementedError, match="expanded"):
        g[1:3].fill_(7)
    assert g.tolist() == [1.0] * 4  # unchanged
    with pytest.raises(RuntimeError, match="more than one element"):
        g.add_(1)  # eager rejects this one too


@pytest.mark.parametrize("fill", ["zero_", "fill_"])
def test_fill_of_a_whole_expanded_view_works_like_eager(dev, fill):
    # Eager allows fill_/zero_ on overlapping memory; lazyxla raised the overlap error.
    g = _grad_of_sum(dev)
    g.zero_() if fill == "zero_" else g.fill_(5.0)
    assert g.tolist() == ([0.0] if fill == "zero_" else [5.0]) * 4


def test_equal_constants_of_other_types_do_not_share_a_signature(dev):
    """Compile-time scalar arguments are keyed with their type and bits: `arange(3)`
    once made `arange(3.0)` int64 (3 == 3.0 shared the shape-inference entry)."""
    assert torch.arange(3, device=dev).dtype == torch.int64
    assert torch.arange(3.0, device=dev).dtype == torch.float32
    assert torch.arange(0, 3.0, 1, device=dev).cpu().tolist() == [0.0, 1.0, 2.0]
    assert torch.full((2,), 1, device=dev).dtype == torch.int64
    assert torch.full((2,), True, device=dev).dtype == torch.bool
    negative, positive = torch.full((2,), -0.0, device=dev), torch.full((2,), 0.0, device=dev)
    assert torch.equal(torch.signbit(negative.cpu()), torch.tensor([True, True]))
    assert torch.equal(torch.signbit(positive.cpu()), torch.tensor([False, False]))
