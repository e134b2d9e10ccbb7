"""Automatic (in-place / "LTC") aliasing: upstream's aliasing scenarios (1-14) and the
pitfalls that concern it (3.1-3.6, 3.14, 3.15, 3.19), numbered as in the donation spec
lazyxla was built to (outside the repository; docs/design.md, "alias/planner.py").

`alias` is `lx.metrics.metric_data("InputOutputAliasCount")`: (graphs compiled,
total donors, samples). Every scenario also compares values with eager CPU.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import lazyxla as lx
from helpers import alias2, assert_close, child_env, counter, materialised, rand

aten = torch.ops.aten


pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


# -- A.1-A.4: the upstream test_input_output_aliases tests ---------------------------

def test_a01_non_view(dev):
    c1, c2 = rand(4, 2, 2, seed=1), rand(4, 2, 2, seed=2)
    t1, t2 = materialised(dev, c1, c2)
    t3 = t1 + t2
    t1 *= 2.0
    t2 += 2.0
    lx.sync()
    assert alias2() == (1, 2.0)
    assert_close(t3, c1 + c2)
    assert_close(t1, c1 * 2.0)
    assert_close(t2, c2 + 2.0)
    assert not lx.is_donated(t1) and not lx.is_donated(t2)


def test_a02_aliasing_with_cloned(dev):
    c1 = rand(4, 2, 2, seed=3)
    t1 = c1.to(dev)
    lx.metrics.clear_all()
    c = t1.clone()
    t1 += 1
    lx.sync()
    assert alias2() == (1, 1.0)
    # upstream forgot to assert this allclose (§3.17)
    assert torch.allclose((t1 - 1).cpu(), c.cpu())
    assert not lx.is_donated(c)
    assert_close(c, c1)
    assert_close(t1, c1 + 1)


def test_a03_aliasing_across_custom_inplace(dev):
    c1 = rand(4, 5, seed=4)
    t1 = c1.to(dev)
    lx.metrics.clear_all()
    t1 *= t1
    lx.sync()
    assert alias2() == (1, 1.0)
    lx.optimization_barrier_([t1])
    t1 *= 100
    lx.sync()
    assert alias2() == (2, 2.0)
    assert_close(t1, c1 * c1 * 100)


def test_a04_aliasing_across_sync(dev):
    c1 = rand(4, 5, seed=5)
    t1 = c1.to(dev)
    lx.metrics.clear_all()
    t1 += 1
    lx.sync()
    assert alias2() == (1, 1.0)
    t1 *= 100
    lx.sync()
    assert alias2() == (2, 2.0)
    assert_close(t1, (c1 + 1) * 100)


# -- A.5: a chain of index_copy_ on a bf16 KV cache ----------------------------------

def test_a05_multiple_inplace_update_bf16_cache(dev):
    gen = torch.Generator().manual_seed(6)
    k_cache_cpu = torch.randn(1024, 16, 64, generator=gen).to(torch.bfloat16)
    key_cpu = torch.randn(128, 16, 64, generator=gen).to(torch.bfloat16)
    # unique slots: with duplicates, which row wins is unspecified in XLA and eager
    slots_cpu = torch.randperm(1024, generator=gen)[:128].reshape(1, 128)
    k_cache, key, slots = materialised(dev, k_cache_cpu, key_cpu, slots_cpu)
    for _ in range(10):
        k_cache.index_copy_(0, slots.flatten(), key)
        k_cache_cpu.index_copy_(0, slots_cpu.flatten(), key_cpu)
    lx.sync()
    lx.wait_device_ops()
    assert_close(k_cache, k_cache_cpu, rtol=0, atol=0)
    assert torch.equal(k_cache[slots_cpu[0][0]].cpu(), key_cpu[0])
    lowered = lx.metrics.counter_value("aten::index_put") is None and \
        lx.metrics.counter_value("aten::index_copy") is None
    if lowered:
        assert alias2()[1] == 1.0
    # Whether or not index_copy_ is lowered (it may still run by host fallback), the
    # cache stays in place-updatable: the next in-place update reuses its buffer.
    lx.metrics.clear_all()
    k_cache.mul_(2)
    lx.sync()
    assert alias2() == (1, 1.0)
    assert_close(k_cache, k_cache_cpu * 2, rtol=0, atol=0)


# -- A.6: gradient accumulation over plain steps -------------------------------------

def test_a06_grad_accum(dev):
    torch.manual_seed(7)
    cpu_model = torch.nn.Linear(784, 10, bias=False)
    dev_model = torch.nn.Linear(784, 10, bias=False)
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to(dev)
    lx.sync()
    lx.metrics.clear_all()
    gen = torch.Generator().manual_seed(8)
    for _ in range(4):
        x = torch.randn(8, 784, generator=gen)
        cpu_model(x).sum().backward()
        dev_model(x.to(dev)).sum().backward()
        lx.sync()
    # step 1 creates .grad (no donor); step 2 accumulates into it in place (one donor);
    # steps 3 and 4 reuse step 2's executable
    assert alias2() == (2, 1.0)
    assert counter("UncachedCompile") == 2 and counter("CachedCompile") == 2
    assert_close(dev_model.weight.grad, cpu_model.weight.grad, rtol=3e-2, atol=1e-3)


# -- A.7 / §3.1: donors are part of the key ------------------------------------------

def test_a07_separate_graphs_donors_hashed(dev):
    t0 = torch.tensor([1], device=dev)
    t1 = torch.tensor([2], device=dev)
    lx.sync()
    lx.metrics.clear_all()
    t1.add_(t0)
    lx.sync()
    key2 = lx.debug.donation_report().graph_key
    assert lx.debug.donation_report().donors == 1
    t2 = t1 + t0
    lx.sync()
    key3 = lx.debug.donation_report().graph_key
    assert lx.debug.donation_report().donors == 0
    # identical IR and parameter wiring; only graph 2 donates: two executables
    assert key2 != key3
    assert counter("UncachedCompile") == 2
    assert t1.item() == 3
    assert t2.item() == 4
    assert not lx.is_donated(t1)


# -- A.8 / §3.2: lx.save of an in-place-updated tensor must not donate ---------------

def test_a08_save_no_aliasing(dev, tmp_path):
    t0 = torch.tensor([1], device=dev)
    t1 = torch.tensor([2], device=dev)
    lx.sync()
    t2 = t0 + t1
    t1.add_(1)
    lx.save(t1, str(tmp_path / "t1.pt"))
    lx.sync()
    assert t2.item() == 3
    assert t1.item() == 3
    assert torch.load(str(tmp_path / "t1.pt")).tolist() == [3]


# -- A.9 / §3.3: constants are not shared donatable buffers --------------------------

def test_a09_device_data_cache_no_aliasing(dev):
    t0 = torch.tensor(42, device=dev)
    lx.sync()
    t0.add_(1)
    lx.sync()
    assert t0.item() == 43
    t1 = torch.tensor(42, device=dev)
    lx.sync()
    t1.add_(1)
    lx.sync()
    assert t1.item() == 43
    assert t0.item() == 43


# -- A.10: scalar operands are never donated -----------------------------------------

def test_a10_scalar_operands_not_donated(dev):
    c = rand(3, seed=10)
    t, = materialised(dev, c)
    t.add_(2.5)
    lx.sync()
    # only t; Python scalars are runtime operands (not even parameters here)
    assert alias2() == (1, 1.0)
    report = lx.debug.donation_report()
    assert len(report.params) == 1 and report.params[0]["donated"]
    x = torch.tensor(2.5, device=dev)
    lx.sync()
    assert x.item() == 2.5
    t.add_(2.5)
    lx.sync()
    assert x.item() == 2.5
    assert_close(t, c + 5.0)


# -- A.11: host reads never donate automatically -------------------------------------

def test_a11_cpu_does_not_donate(dev):
    c0, c1 = rand(3, seed=11), rand(3, seed=12)
    t0, t1 = materialised(dev, c0, c1)
    t2 = t0 + t1
    t1.add_(1)
    assert_close(t1.cpu(), c1 + 1)
    assert alias2() == (1, 0.0)
    lx.sync()
    # Same numbers as upstream, another route: .cpu() installed t1's new value, so the
    # barrier only computes t2; t1's old buffer is read by nobody after it and is
    # donated as a dead input (upstream recomputes t1 there and donates by lineage).
    assert alias2() == (2, 1.0)
    assert "no longer needed" not in str(lx.debug.donation_report())
    assert_close(t2, c0 + c1)
    assert_close(t1, c1 + 1)


# -- A.12 / §3.6: partial syncs ------------------------------------------------------

def test_a12_partial_sync_donates_when_safe(dev):
    c1 = rand(3, seed=13)
    t1, = materialised(dev, c1)
    t1.add_(1)
    lx.sync_tensors([t1], wait=True, donate_inplace=True)
    assert alias2() == (1, 1.0)
    assert_close(t1, c1 + 1)


def test_a12_partial_sync_keeps_buffer_needed_by_pending(dev):
    """§3.6 / API [N]: upstream donates t1's old buffer here and the barrier then fails."""
    c0, c1 = rand(3, seed=14), rand(3, seed=15)
    t0, t1 = materialised(dev, c0, c1)
    t2 = t0 + t1
    t1.add_(1)
    lx.sync_tensors([t1], wait=True, donate_inplace=True)
    # (the executable may come from the cache: look at the report, not at alias2())
    assert lx.debug.donation_report().donors == 0
    reasons = [p["reason"] for p in lx.debug.donation_report().params]
    assert any("pending computation" in r for r in reasons), reasons
    lx.sync()
    assert_close(t2, c0 + c1)
    assert_close(t1, c1 + 1)


def test_a12_partial_sync_keeps_buffer_held_by_other_tensor(dev):
    c1 = rand(3, seed=16)
    t1 = c1.to(dev)
    other = torch.empty(3, device=dev)
    other.copy_(t1)  # same buffer behind two tensors, no computation
    lx.sync()
    lx.metrics.clear_all()
    t1.add_(1)
    lx.sync_tensors([t1])
    assert lx.debug.donation_report().donors == 0
    assert "held by" in lx.debug.donation_report().params[0]["reason"]
    assert_close(other, c1)
    assert_close(t1, c1 + 1)


# -- A.13: aliasing switched off -----------------------------------------------------

def test_a13_aliasing_off_at_runtime(dev):
    c1, c2 = rand(4, 2, 2, seed=17), rand(4, 2, 2, seed=18)
    t1, t2 = c1.to(dev), c2.to(dev)
    lx.sync()
    lx.set_aliasing(False)
    assert not lx.aliasing_enabled()
    lx.metrics.clear_all()
    t3 = t1 + t2
    t1 *= 2.0
    t2 += 2.0
    lx.sync()
    assert alias2() == (1, 0.0)
    assert_close(t3, c1 + c2)
    assert_close(t1, c1 * 2.0)
    # explicit donation at a step barrier is off too, and the tensor stays usable
    assert lx.set_buffer_donation(t1) is True
    y = t1 * 3
    lx.sync()
    assert alias2()[1] == 0.0
    assert not lx.is_donated(t1)
    assert_close(t1, c1 * 2.0)
    assert_close(y, c1 * 6.0)
    assert "aliasing is off" in lx.debug.donation_report().params[0]["reason"]


_ALIASING_OFF_SCRIPT = textwrap.dedent("""
    import torch, lazyxla as lx
    dev = lx.device()
    assert not lx.aliasing_enabled()
    c1, c2 = torch.arange(4.0), torch.arange(4.0) + 10
    t1, t2 = c1.to(dev), c2.to(dev)
    lx.sync()
    lx.metrics.clear_all()
    t3 = t1 + t2
    t1 *= 2.0
    t2 += 2.0
    lx.sync()
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 0.0
    assert torch.equal(t3.cpu(), c1 + c2) and torch.equal(t1.cpu(), c1 * 2)
    assert lx.set_buffer_donation(t1)
    y = t1 + 1
    lx.sync()
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 0.0
    assert not lx.is_donated(t1)
    assert torch.equal(t1.cpu(), c1 * 2) and torch.equal(y.cpu(), c1 * 2 + 1)
    lx.set_aliasing(True)  # the run-time switch still works
    t1.add_(1)
    lx.sync()
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 1.0
    print("OK")
""")


def test_a13_aliasing_env_off_at_start():
    proc = subprocess.run([sys.executable, "-c", _ALIASING_OFF_SCRIPT], env=child_env(LAZYXLA_ALIASING="0"), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK")


# -- A.14: no eager mode; the eager-like path (host fallback) donates nothing ---------

def test_a14_host_fallback_donates_nothing(dev):
    """Upstream's eager mode runs each op as its own graph without in-place aliasing.
    Our closest path is the host fallback (ops without a lowering): it materialises its
    operands with a sync that donates nothing. Called directly, so that it stays
    exercised whatever gets lowered."""
    from lazyxla.frontend.primitives import op_info
    from lazyxla.frontend.fallback import run_on_host
    c, o = rand(6, seed=19), rand(6, seed=190)
    t, other = materialised(dev, c, o)
    t.add_(1)  # pending in-place update: the fallback's sync computes it
    op = torch.ops.aten.mul.Tensor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = run_on_host(op, op_info(op), (t, other), {})
    assert lx.metrics.counter_value("aten::mul") == 1
    assert alias2() == (1, 0.0)
    assert not lx.is_donated(t) and not lx.is_donated(other)
    assert_close(out, (c + 1) * o)
    assert_close(t, c + 1)
    assert_close(other, o)


# -- §3.4 / §3.5: flag lifetime ------------------------------------------------------

def test_s3_5_flag_not_propagated_to_recomputed_data(dev):
    c = rand(5, seed=20)
    x = c.to(dev)
    assert lx.set_buffer_donation(x)
    x.mul_(2)
    lx.sync()
    assert lx.get_buffer_donation(x) is False
    lx.metrics.clear_all()
    y = x + 1  # x is neither marked nor updated: must not be donated
    lx.sync()
    assert alias2() == (1, 0.0)
    assert not lx.is_donated(x)
    assert_close(x, c * 2)
    assert_close(y, c * 2 + 1)


# -- §3.14 (#8353): operand wiring is part of the key --------------------------------

def test_s3_14_wiring_in_key(dev):
    cs = [rand(3, 3, seed=21 + i) for i in range(3)]
    t0, t1, t2 = (c.to(dev) for c in cs)
    lx.sync()
    outs_a = [t0.t() * 1, t1.t() * 1, t2.t() * 1, (t0 * t1) + t2]
    outs_b = [t0.t() * 1, t1.t() * 1, t2.t() * 1, (t0 * t2) + t1]
    ha, hb = lx.graph_hash(outs_a), lx.graph_hash(outs_b)
    assert ha != hb
    lx.metrics.clear_all()
    lx.sync_tensors(outs_a)
    lx.sync_tensors(outs_b)
    assert counter("UncachedCompile") == 2
    assert_close(outs_a[3], cs[0] * cs[1] + cs[2])
    assert_close(outs_b[3], cs[0] * cs[2] + cs[1])
    for i in range(3):
        assert_close(outs_a[i], cs[i].t())
        assert_close(outs_b[i], cs[i].t())


# -- §3.15 (#3604): equal scalar values must not change the key ----------------------

def test_s3_15_equal_scalars_same_key(dev):
    """Hyper-parameters in Scalar slots (alpha=, value=) and 0-d host tensors are
    runtime operands: equal or different values, one executable."""
    ca, cb = rand(4, seed=24), rand(4, seed=240)
    a, b = ca.to(dev), cb.to(dev)
    lx.sync()

    def step(lr, wd, host_a, host_b):
        return torch.add(a, b, alpha=lr).addcmul(a, b, value=wd) * torch.tensor(host_a) - torch.tensor(host_b)

    def expected(lr, wd, host_a, host_b):
        return torch.add(ca, cb, alpha=lr).addcmul(ca, cb, value=wd) * torch.tensor(host_a) - torch.tensor(host_b)

    args1, args2 = (0.5, 0.25, 2.0, 3.0), (0.5, 0.5, 2.0, 2.0)  # the second: equal values
    y1, y2 = step(*args1), step(*args2)
    assert lx.graph_hash([y1]) == lx.graph_hash([y2])
    lx.metrics.clear_all()
    lx.sync_tensors([y1])
    lx.sync_tensors([y2])
    assert counter("UncachedCompile") == 1
    assert counter("CachedCompile") == 1
    assert_close(y1, expected(*args1))
    assert_close(y2, expected(*args2))


def test_s3_15_python_scalars_in_tensor_slots_same_key(dev):
    """Python numbers in Tensor-typed arguments (x * 0.5, x + b) are runtime operands too."""
    c = rand(4, seed=25)
    x = c.to(dev)
    lx.sync()
    y1 = x * 0.5 + 0.25
    y2 = x * 0.5 + 0.5
    assert lx.graph_hash([y1]) == lx.graph_hash([y2])
    lx.metrics.clear_all()
    lx.sync_tensors([y1, y2])
    y3 = x * 0.75 + 0.5
    lx.sync_tensors([y3])
    assert counter("UncachedCompile") == 2  # one for the pair, one for y3
    assert_close(y1, c * 0.5 + 0.25)
    assert_close(y2, c * 0.5 + 0.5)
    assert_close(y3, c * 0.75 + 0.5)


# -- §3.19 and more on clones ---------------------------------------------------------

def test_clone_before_inplace_keeps_clone(dev):
    c = rand(6, seed=25)
    t = c.to(dev)
    saved = t.clone()
    t.mul_(3)
    lx.sync()
    assert not lx.is_donated(saved)
    assert_close(saved, c)
    assert_close(t, c * 3)
    # the materialised clone owns its own buffer: updating it in place aliases it
    lx.metrics.clear_all()
    saved.add_(1)
    lx.sync()
    assert alias2() == (1, 1.0)
    assert_close(saved, c + 1)
    assert_close(t, c * 3)


def test_optimization_barrier_keeps_aliasing(dev):
    ca, cb = rand(3, 4, seed=26), rand(3, 4, seed=27)
    a, b = materialised(dev, ca, cb)
    a.add_(1)
    b.mul_(2)
    lx.optimization_barrier_([a, b])
    a.mul_(b)
    lx.sync()
    assert alias2() == (1, 2.0)
    assert_close(a, (ca + 1) * (cb * 2))
    assert_close(b, cb * 2)


def test_inplace_through_view_aliases_base(dev):
    c = rand(4, 6, seed=28)
    base = c.to(dev)
    view = base[1:3]
    lx.sync()
    lx.metrics.clear_all()
    view.mul_(10)
    lx.sync()
    assert alias2() == (1, 1.0)
    expected = c.clone()
    expected[1:3] *= 10
    assert_close(base, expected)
    assert_close(view, expected[1:3])


def test_donated_tensor_views_raise(dev):
    c = rand(4, 4, seed=29)
    t = c.to(dev)
    v = t[0]
    d = t.detach()
    assert lx.set_buffer_donation(t)
    out = t * 2
    lx.sync()
    assert lx.is_donated(t)
    assert lx.is_donated(d)
    for fn in (lambda: v.cpu(), lambda: d.sum(), lambda: t[1], lambda: t.cpu(), lambda: t.tolist(),
               lambda: t.add_(1), lambda: d.mul_(2)):
        with pytest.raises(lx.DonatedBufferError, match=r"donated") as info:
            fn()
        assert "shape=[4, 4]" in str(info.value) and "float32" in str(info.value)
    # printing never raises: it shows what happened
    assert "donated" in repr(v) and "donated" in repr(t)
    lx.sync_tensors([t, v])  # nothing to compute: a no-op, like a barrier
    lx.sync()
    assert lx.is_donated(t)
    assert_close(out, c * 2)


def test_compute_from_view_of_donated_tensor_never_breaks_barrier(dev):
    """Regression: `w = v + 1` on a view of a donated tensor used to make every later
    lx.sync() raise for as long as `w` was alive."""
    c, k = rand(4, 4, seed=32), rand(3, seed=33)
    t, keep = c.to(dev), k.to(dev)
    v = t[0]
    assert lx.set_buffer_donation(t)
    out = t * 2
    lx.sync()
    derived = []
    for fn in (lambda: v + 1, lambda: v.add_(1), lambda: v.t().sum()):
        try:
            derived.append(fn())  # may raise at the op already (preferred) ...
        except lx.DonatedBufferError:
            pass
    for i in range(2):
        keep.mul_(2)
        lx.sync()  # ... or later, but never at a barrier
        assert_close(keep, k * 2 ** (i + 1))
    for w in derived:
        with pytest.raises(lx.DonatedBufferError, match=r"donated"):
            w.cpu()
    with pytest.raises(lx.DonatedBufferError, match=r"donated"):
        t.cpu()
    assert_close(out, c * 2)


def test_donated_tensor_kept_referenced_does_not_disturb_later_syncs(dev):
    c, k = rand(5, seed=30), rand(5, seed=31)
    dead = c.to(dev)
    keep = k.to(dev)
    assert lx.set_buffer_donation(dead)
    y = dead + keep
    lx.sync()
    assert lx.is_donated(dead)
    for i in range(3):
        keep.add_(1)
        z = keep * 2
        lx.sync()
        lx.sync_tensors([keep * 3])
        assert_close(z, (k + 1 + i) * 2)
    assert_close(y, c + k)
    assert lx.is_donated(dead)
    assert repr(dead).startswith("<lazyxla tensor") and "donated" in repr(dead)
