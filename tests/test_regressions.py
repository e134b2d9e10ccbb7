"""Minimal regressions for bugs found by the differential tester (tests/test_differential.py)."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx


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
