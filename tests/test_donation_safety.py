"""Regression tests for donation bugs found while porting upstream's donation scenarios.

Each test names the donation rule it protects (README.md, "What is supported";
docs/design.md, "alias/planner.py"); values are compared with eager CPU.
"""
from __future__ import annotations

import copy
import dataclasses
import gc

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from helpers import assert_close, rand


pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def report():
    return lx.debug.donation_report()


# -- buffers whose creating tensor is gone (orphans) ---------------------------------

def test_inplace_update_after_copy_from_dead_tensor_is_aliased(dev):
    """Bug: `a.copy_(tmp)` makes `a` hold tmp's buffer, owned by tmp's storage; once tmp
    died, no in-place update of `a` was ever aliased again (2x memory every step)."""
    c = rand(8, 4, seed=1)
    a = torch.empty(8, 4, device=dev)
    tmp = c.to(dev)
    a.copy_(tmp)
    del tmp
    gc.collect()
    lx.sync()
    for i in range(2):
        a.mul_(2)
        lx.sync()
        assert report().donors == 1, str(report())
    assert_close(a, c * 4)


def test_inplace_update_after_host_fallback_writeback_is_aliased(dev):
    """Bug: the host fallback writes mutated arguments back as new buffers without an
    owner; the tensor then was never aliased again (e.g. a KV cache after a fallback
    index_copy_)."""
    from lazyxla.frontend.primitives import op_info
    from lazyxla.frontend.fallback import run_on_host
    c = rand(16, 4, seed=2)
    cache = c.to(dev)
    lx.sync()
    op = torch.ops.aten.add_.Tensor
    with pytest.warns(UserWarning, match="host"):
        run_on_host(op, op_info(op), (cache, torch.ones(4).to(dev)), {})
    cache.mul_(3)
    lx.sync()
    assert report().donors == 1, str(report())
    assert_close(cache, (c + 1) * 3)


def test_orphan_buffer_kept_while_another_tensor_holds_or_needs_it(dev):
    c = rand(4, seed=3)
    a = torch.empty(4, device=dev)
    b = torch.empty(4, device=dev)
    tmp = c.to(dev)
    a.copy_(tmp)
    b.copy_(tmp)  # a and b share the orphan buffer
    del tmp
    gc.collect()
    a.add_(1)
    lx.sync()
    assert report().donors == 0 and "held by" in report().params[0]["reason"]
    assert_close(b, c)
    # an orphan read by a pending computation outside a partial sync is kept too
    d = torch.empty(4, device=dev)
    tmp = c.to(dev)
    d.copy_(tmp)
    del tmp
    gc.collect()
    reader = d * 10
    d.add_(1)
    lx.sync_tensors([d])
    assert report().donors == 0 and "pending" in report().params[0]["reason"]
    lx.sync()
    assert_close(reader, c * 10)
    assert_close(d, c + 1)
    assert_close(a, c + 1)


# -- explicit donation must never invalidate a tensor the user did not mark ----------

def test_marked_buffer_copied_to_another_tensor_is_not_donated(dev):
    """Bug: a marked tensor updated in place (explicit and automatic donor at once)
    was donated even though a `copy_` made after marking still held the buffer: the
    copy, never marked, became unusable."""
    c = rand(3, seed=4)
    t = c.to(dev)
    assert lx.set_buffer_donation(t)
    other = torch.empty(3, device=dev)
    other.copy_(t)
    t.add_(1)
    lx.sync()
    assert report().donors == 0 and "held by" in report().params[0]["reason"]
    assert not lx.is_donated(other)
    assert_close(other, c)
    assert_close(t, c + 1)


def test_marked_buffer_copied_and_not_updated_is_not_donated(dev):
    c = rand(3, seed=5)
    t = c.to(dev)
    assert lx.set_buffer_donation(t)
    other = torch.empty(3, device=dev)
    other.copy_(t)
    y = t * 2
    lx.sync()
    assert report().donors == 0
    assert not lx.is_donated(other) and not lx.is_donated(t)
    assert_close(other, c)
    assert_close(y, c * 2)


def test_marking_with_pending_reader_is_allowed_and_safe(dev):
    """Bug: lx.set_buffer_donation(x) returned False whenever any pending computation
    read x (SPEC §4 B.25/26 mark x while cos(x) is pending). Marking is safe: the
    barrier computes the readers first; partial syncs keep the buffer for them."""
    c = rand(5, seed=6)
    x = c.to(dev)
    y = torch.cos(x)
    z = x * 2
    assert lx.set_buffer_donation(x) is True
    with lx.explicit_donation(True):
        lx.sync_tensors([z])  # y still needs x: kept
    assert not lx.is_donated(x)
    assert "pending" in report().params[0]["reason"]
    lx.sync()  # computes y, then x is gone
    assert lx.is_donated(x)
    assert_close(y, torch.cos(c))
    assert_close(z, c * 2)


def test_marking_with_pending_clone_is_refused(dev):
    """An unmaterialised clone shares the buffer: marking returns False."""
    c = rand(5, seed=7)
    x = c.to(dev)
    clone = x.clone()
    assert lx.set_buffer_donation(x) is False
    assert lx.set_buffer_donation([x, clone]) == [False, False]
    lx.sync()
    assert lx.set_buffer_donation(x) is True  # the clone has its own buffer now
    lx.sync()
    assert_close(clone, c)


# -- a donated tensor that stays referenced never disturbs later syncs ---------------

def _poisoned_pending(dev, seed):
    """A pending tensor whose input buffer is dead. The frontend refuses to build one
    (ops on donated tensors or their views raise), so simulate the runtime state directly:
    this checks the sync's own defence, not the frontend's."""
    c = rand(4, seed=seed)
    x = c.to(dev)
    y = x * 2
    x._st.value.data.mark_donated("simulated")
    return x, y


def test_barrier_skips_pending_tensor_reading_a_donated_buffer(dev):
    """Bug (before the frontend check): `w = v + 1` on a view of a donated tensor
    made every later lx.sync() raise while `w` was alive."""
    k = rand(4, seed=10)
    keep = k.to(dev)
    x, y = _poisoned_pending(dev, 11)
    for i in range(2):
        keep.add_(1)
        lx.sync()
        assert_close(keep, k + 1 + i)
    with pytest.raises(lx.DonatedBufferError, match="donated"):
        y.cpu()
    with pytest.raises(lx.DonatedBufferError, match="donated"):
        lx.sync_tensors([y])
    assert lx.is_donated(x)


def test_graph_size_cut_skips_pending_tensor_reading_a_donated_buffer(dev, monkeypatch):
    k = rand(4, seed=12)
    keep = k.to(dev)
    x, y = _poisoned_pending(dev, 13)
    monkeypatch.setattr(config, "SETTINGS", dataclasses.replace(config.SETTINGS, graph_op_limit=3))
    for _ in range(8):  # several graph-size cuts while `y` is alive
        keep.add_(1)
    monkeypatch.undo()
    assert (lx.metrics.counter_value("GraphSizeCut") or 0) >= 1
    lx.sync()
    assert_close(keep, k + 8)
    with pytest.raises(lx.DonatedBufferError, match="donated"):
        y.cpu()


# -- uploads own their memory ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1 << 20, 1 << 23], ids=["runtime-copy", "compiled-copy"])
def test_upload_does_not_alias_the_host_tensor(dev, dtype, n):
    """Bug: on the CPU backend jax.device_put adopted the CPU tensor's memory, so a later
    in-place change of the source (`h.to(dev); h.mul_(0)`) changed the device tensor, and
    an in-place step that donated the upload could write through into `h`. Both sizes
    take JAX's zero-copy path; the device copy is a runtime copy below 16 MB, a compiled
    one above (runtime/transfer.py)."""
    h = torch.arange(n, dtype=torch.float32).remainder_(250.0).to(dtype)
    expected = h.clone()
    w = h.to(dev)
    h2 = h.clone()
    dst = torch.empty(n, dtype=dtype, device=dev)
    dst.copy_(h2)
    h.mul_(0)
    h2.add_(7)
    assert torch.equal(w.cpu(), expected)
    assert torch.equal(dst.cpu(), expected)
    zeros = h.clone()
    w.add_(1)
    lx.sync()
    assert report().donors == 1
    assert torch.equal(h, zeros)  # the donated buffer was not the host tensor's memory
    assert torch.equal(w.cpu(), expected + 1)


def test_a_reused_donor_plan_follows_who_holds_a_buffer(dev):
    """A step's donor plan is reused only while every parameter's facts are the last step's
    (alias/planner.py): a copy holding the weight's buffer keeps it from donation for that
    step, and the plan comes back once the copy is gone."""
    from lazyxla import metrics
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = rand(2, 4).to(dev)

    def step() -> tuple:
        metrics.clear_all()
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()
        report = lx.debug.donation_report()
        return metrics.counter_value("DonorPlanReused") or 0, report.donors, report.params[0]["reason"]
    for _ in range(3):
        step()
    assert step() == (1, 2, "reused by an output")
    held = torch.zeros_like(model.weight)
    held.copy_(model.weight)   # the same buffer, held by another live tensor
    lx.sync()
    before = held.cpu()
    reused, donors, reason = step()
    assert (reused, donors) == (0, 1) and reason.startswith("also held by live tensor")
    assert torch.equal(held.cpu(), before)   # still readable: its buffer was not donated
    del held
    assert step() == (1, 2, "reused by an output")


def test_deepcopy_of_a_model_keeps_its_own_buffers(dev):
    # Bug: the copy's tensors shared the original's buffers through an unregistered storage,
    # so the original's next step donated them and the copy raised DonatedBufferError.
    def build():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
        m[1].weight = m[0].weight   # a tied weight stays tied in the copy
        return m

    def train(m, x, steps):
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        for _ in range(steps):
            opt.zero_grad()
            m(x).sum().backward()
            opt.step()
            if x.device.type != "cpu":
                lx.sync()
        return [p.detach().cpu() for p in m.parameters()]

    x = torch.tensor([[1, 2, 3]])
    eager = build()
    eager_copy = copy.deepcopy(eager)
    lazy = build().to(dev)
    with torch.no_grad():
        lazy[0].weight.mul_(1.0)   # pending work in the original is copied as its value
    lazy_copy = copy.deepcopy(lazy)
    assert lazy_copy[1].weight is lazy_copy[0].weight and lazy_copy[0].weight is not lazy[0].weight
    assert isinstance(lazy_copy[0].weight, torch.nn.Parameter)
    for a, b in zip(train(lazy, x.to(dev), 3), train(eager, x, 3)):
        torch.testing.assert_close(a, b)
    for a, b in zip(lazy_copy.parameters(), eager_copy.parameters()):   # untouched by the original's steps
        assert torch.equal(a.detach().cpu(), b.detach())
    for a, b in zip(train(lazy_copy, x.to(dev), 2), train(eager_copy, x, 2)):
        torch.testing.assert_close(a, b)


def test_shallow_copy_shares_the_storage_as_in_eager(dev):
    # Bug: copy.copy of a lazy tensor went through __reduce_ex__ (pickling's host copy) and
    # returned a CPU tensor that no longer shared anything with the original.
    def run(device):
        t = torch.arange(6.0, device=device).reshape(2, 3)
        p = torch.nn.Parameter(torch.ones(3, device=device))
        c, col, q = copy.copy(t), copy.copy(t[:, 1]), copy.copy(p)
        assert c is not t and c.device == t.device and q.device == p.device
        assert isinstance(q, torch.nn.Parameter) and q.requires_grad
        c.add_(1)            # writes through the copy reach the original, and the other way round
        col.mul_(10)
        with torch.no_grad():
            q.mul_(2)
        t[0, 0] = -1
        return [x.detach().cpu() for x in (t, c, col, p, q)]

    for got, want in zip(run(dev), run("cpu")):
        assert torch.equal(got, want)
