"""Explicit buffer donation: upstream's explicit-donation scenarios (15-30) and lazyxla's
rules around lx.set_buffer_donation, the switches and the donation report (README.md,
"What is supported"; docs/design.md, "alias/planner.py").

Upstream's `Deleted(t)` is `lx.is_donated(t)` plus: any use raises
`lx.DonatedBufferError` naming shape/dtype and saying "donated".
"""
from __future__ import annotations

import re

import pytest
import torch

import lazyxla as lx
from helpers import alias2, assert_close, counter, rand


pytestmark = pytest.mark.usefixtures("fresh_compile_cache")


def assert_deleted(t):
    assert lx.is_donated(t)
    with pytest.raises(lx.DonatedBufferError, match="donated") as info:
        t + 1
    msg = str(info.value)
    assert f"shape={list(t.shape)}" in msg and str(t.dtype) in msg
    with pytest.raises(lx.DonatedBufferError, match="donated"):
        t.cpu()


def setup_pair(dev, seed):
    c0, c1 = rand(4, 2, 2, seed=seed), rand(4, 2, 2, seed=seed + 1)
    return c0, c1, c0.to(dev), c1.to(dev)


# -- B.15-17: explicit donation together with in-place aliasing ----------------------

def test_b15_explicit_with_ltc_donation_at_barrier(dev):
    c0, c1, t0, t1 = setup_pair(dev, 15)
    assert lx.set_buffer_donation(t0) is True
    assert lx.get_buffer_donation(t0) is True
    assert lx.get_buffer_donation(t1) is False
    t2 = t0 + t1
    t1 += 2
    lx.sync(wait=True)
    assert_deleted(t0)
    assert alias2() == (1, 2.0)
    assert_close(t2, c0 + c1)
    assert_close(t1, c1 + 2)


@pytest.mark.parametrize("enabled", [True, False], ids=["b16-enabled", "b17-disabled"])
def test_b16_b17_explicit_at_partial_sync(dev, enabled):
    c0, c1, t0, t1 = setup_pair(dev, 16 if enabled else 17)
    with lx.explicit_donation(enabled):
        assert lx.set_buffer_donation(t0)
        t2 = t0 + t1
        t1 += 2
        lx.sync_tensors([t0, t1, t2], wait=True, donate_inplace=False)
    if enabled:
        assert_deleted(t0)
        assert alias2() == (1, 1.0)
    else:
        assert not lx.is_donated(t0)
        assert_close(t0, c0)
        assert alias2() == (1, 0.0)
        report = lx.debug.donation_report()
        assert any("not enabled" in p["reason"] for p in report.params), str(report)
    assert_close(t2, c0 + c1)
    assert_close(t1, c1 + 2)


def test_b18_explicit_and_ltc_overlap_deduplicated(dev):
    c = rand(4, 2, 2, seed=18)
    t0 = c.to(dev)
    assert lx.set_buffer_donation(t0)
    t0 += 2
    lx.sync()
    assert alias2() == (1, 1.0)
    assert lx.debug.donation_report().params[0]["kind"] == "automatic+explicit"
    assert_close(t0, c + 2)


def test_b19_explicit_partial_sync_counter(dev):
    c = rand(4, 2, 2, seed=19)
    t0 = c.to(dev)
    with lx.explicit_donation(True):
        assert lx.set_buffer_donation(t0)
        assert "XlaSetBufferDonation" in lx.metrics.counter_names()
        assert lx.metrics.counter_value("XlaSetBufferDonation") == 1
        t1 = t0 + 1
        lx.sync_tensors([t0, t1], wait=True, donate_inplace=False)
    assert alias2() == (1, 1.0)
    assert_deleted(t0)
    assert_close(t1, c + 1)


def test_b20_explicit_inplace_aliasing_partial_sync(dev):
    c = rand(4, 2, 2, seed=20)
    t0 = c.to(dev)
    with lx.explicit_donation(True):
        assert lx.set_buffer_donation(t0)
        t0 *= 2
        lx.sync_tensors([t0], wait=True, donate_inplace=False)
    assert alias2() == (1, 1.0)
    assert not lx.is_donated(t0)  # t0 holds the new data
    assert_close(t0, c * 2)


@pytest.mark.parametrize("enabled", [True, False], ids=["b21_enabled", "b22_default"])
def test_b21_b22_no_op_sync_keeps_flag(dev, enabled):
    c = rand(4, 2, 2, seed=21)
    t0 = c.to(dev)
    lx.set_explicit_donation(enabled)
    assert lx.set_buffer_donation(t0)
    lx.sync()
    assert lx.get_buffer_donation(t0) is True
    lx.sync()
    lx.sync_tensors([t0])
    assert lx.get_buffer_donation(t0) is True
    assert not lx.is_donated(t0)
    assert_close(t0, c)
    assert lx.metrics.metric_data("InputOutputAliasCount") is None  # nothing compiled


def test_b23_donation_on_non_data_tensor(dev):
    x = rand(5, 5, seed=23).to(dev)
    r = x + 1
    lx.metrics.clear_all()
    assert lx.set_buffer_donation(r) is False
    assert lx.get_buffer_donation(r) is False
    assert "XlaSetBufferDonation" not in lx.metrics.counter_names()
    lx.sync()
    assert not lx.is_donated(x)
    assert_close(r, rand(5, 5, seed=23) + 1)


def test_b24_flag_reset_by_recomputation(dev):
    c = rand(6, seed=24)
    t = c.to(dev)
    assert lx.set_buffer_donation(t)
    t.add_(1)
    assert lx.get_buffer_donation(t) is False  # pending computation: no buffer yet
    lx.sync()
    assert lx.get_buffer_donation(t) is False
    assert_close(t, c + 1)
    # and the next step does not donate it
    y = t * 2
    lx.sync()
    assert not lx.is_donated(t)
    assert_close(y, (c + 1) * 2)


def test_b25_explicit_donors_in_hash(dev):
    x = rand(5, seed=25).to(dev)
    with lx.explicit_donation(True):
        y = torch.cos(x)
        h0 = lx.graph_hash([y])
        assert lx.set_buffer_donation(x)
        h1 = lx.graph_hash([y])
        assert h0 != h1
        assert lx.set_buffer_donation(x, False)
        assert lx.graph_hash([y]) == h0
    assert not lx.is_donated(x)
    assert_close(y, torch.cos(rand(5, seed=25)))


def test_b26_hash_with_buffer_donor(dev):
    x = rand(5, seed=26).to(dev)
    y = torch.cos(x)
    h0 = lx.graph_hash([y])
    assert lx.set_buffer_donation(x)
    assert lx.graph_hash([y]) == h0  # explicit donation disabled: flag not used
    with lx.explicit_donation(True):
        assert lx.graph_hash([y]) != h0
    assert lx.graph_hash([y]) == h0
    assert_close(y, torch.cos(rand(5, seed=26)))


def test_b27_donor_order_independence(dev):
    cs = [rand(4, seed=270 + i) for i in range(6)]
    a, b, c, a2, b2, c2 = (x.to(dev) for x in cs)
    with lx.explicit_donation(True):
        assert lx.set_buffer_donation([c, a]) == [True, True]
        o = a + b + c
        lx.sync_tensors([o], wait=True, donate_inplace=False)
        assert alias2() == (1, 2.0)
        donated = [p["param"] for p in lx.debug.donation_report().params if p["donated"]]
        assert len(donated) == 2
        assert lx.set_buffer_donation([a2, c2]) == [True, True]
        o2 = a2 + b2 + c2
        lx.sync_tensors([o2], wait=True, donate_inplace=False)
    assert alias2() == (1, 2.0)
    assert counter("CachedCompile") == 1
    assert [p["param"] for p in lx.debug.donation_report().params if p["donated"]] == donated
    for t in (a, c, a2, c2):
        assert lx.is_donated(t)
    assert not lx.is_donated(b) and not lx.is_donated(b2)
    assert_close(o, cs[0] + cs[1] + cs[2])
    assert_close(o2, cs[3] + cs[4] + cs[5])


def test_b28_use_of_donated_buffer_raises(dev):
    c0, c1 = rand(3, seed=28), rand(3, seed=29)
    t0, t1 = c0.to(dev), c1.to(dev)
    with lx.explicit_donation(True):
        assert lx.set_buffer_donation(t0)
        _ = t0 + t1
        lx.sync(wait=True)
    assert_deleted(t0)
    with pytest.raises(lx.DonatedBufferError, match="donated"):
        t0.item() if t0.numel() == 1 else t0.tolist()
    with pytest.raises(RuntimeError, match=r"shape=\[3\].*float32.*donated"):
        torch.mul(t1, t0)
    assert_close(_, c0 + c1)
    assert_close(t1, c1)


def test_b29_non_lazy_tensor_raises():
    cpu = torch.ones(3)
    with pytest.raises(TypeError, match=r"lazyxla tensor.*cpu.*t\.to\(lx\.device\(\)\)"):
        lx.set_buffer_donation(cpu)
    with pytest.raises(TypeError, match="lazyxla tensor"):
        lx.set_buffer_donation([cpu])
    with pytest.raises(TypeError, match="lazyxla tensor"):
        lx.get_buffer_donation(cpu)
    with pytest.raises(TypeError, match="lazyxla tensor"):
        lx.is_donated(cpu)
    with pytest.raises((TypeError, ValueError)):
        lx.set_buffer_donation("not a tensor")
    assert lx.metrics.counter_value("XlaSetBufferDonation") is None


def test_b30_config_api_context_manager(dev):
    assert lx.explicit_donation_enabled() is False
    with lx.explicit_donation(True) as prev:
        assert prev is False
        assert lx.explicit_donation_enabled() is True
        with lx.explicit_donation(False) as prev2:
            assert prev2 is True
            assert lx.explicit_donation_enabled() is False
            with lx.explicit_donation(True) as prev3:
                assert prev3 is False
                assert lx.explicit_donation_enabled()
            assert lx.explicit_donation_enabled() is False
        assert lx.explicit_donation_enabled() is True
    assert lx.explicit_donation_enabled() is False
    with pytest.raises(ZeroDivisionError):
        with lx.explicit_donation(True):
            assert lx.explicit_donation_enabled()
            1 / 0
    assert lx.explicit_donation_enabled() is False
    # a setting changed inside the body is rolled back as well (restores the saved state)
    with lx.explicit_donation(True):
        lx.set_explicit_donation(True, device=dev)
    assert lx.explicit_donation_enabled() is False
    assert lx.explicit_donation_enabled(dev) is False


# -- lazyxla's extras ---------------------------------------------------------------

def test_batch_call_returns_list(dev):
    c = [rand(3, seed=40 + i) for i in range(3)]
    a, b, d = (x.to(dev) for x in c)
    pending = a + 1
    out = lx.set_buffer_donation([a, pending, b])
    assert out == [True, False, True]
    assert isinstance(out, list)
    assert lx.set_buffer_donation((d,)) == [True]
    assert lx.set_buffer_donation([]) == []
    assert lx.metrics.counter_value("XlaSetBufferDonation") == 3
    assert lx.set_buffer_donation([a, b, d], donate=False) == [True, True, True]
    assert [lx.get_buffer_donation(t) for t in (a, b, d)] == [False, False, False]
    lx.sync()
    assert not any(lx.is_donated(t) for t in (a, b, d))
    assert_close(pending, c[0] + 1)


def test_marking_a_buffer_shared_with_another_tensor_is_refused(dev):
    c = rand(4, seed=50)
    t = c.to(dev)
    clone = t.clone()  # pending: still needs t's buffer
    assert lx.set_buffer_donation(t) is False
    assert lx.get_buffer_donation(t) is False
    copy = torch.empty(4, device=dev)
    copy.copy_(t)  # holds t's buffer itself
    lx.sync()
    assert lx.set_buffer_donation(t) is False
    assert lx.set_buffer_donation(copy) is False
    # views (including detach) go down with the marked tensor: marking is allowed
    u = torch.randn(4).to(dev)
    v, d = u[1:], u.detach()
    assert lx.set_buffer_donation(u) is True
    y = u * 2
    lx.sync()
    assert lx.is_donated(u) and lx.is_donated(d)
    with pytest.raises(lx.DonatedBufferError):
        v.cpu()
    assert_close(clone, c)
    assert_close(copy, c)
    assert not lx.is_donated(t)
    assert y.shape == (4,)


def test_explicit_donation_per_device_and_global(dev):
    assert lx.explicit_donation_enabled(dev) is False
    lx.set_explicit_donation(True, device=lx.device(0))
    assert lx.explicit_donation_enabled(lx.device(0)) is True
    assert lx.explicit_donation_enabled() is False  # global value unchanged
    c0, c1 = rand(3, seed=60), rand(3, seed=61)
    t0, t1 = c0.to(dev), c1.to(dev)
    assert lx.set_buffer_donation(t0)
    y = t0 + t1
    lx.sync_tensors([y], donate_inplace=False)  # device 0 has explicit donation on
    assert lx.is_donated(t0)
    # the global setting clears per-device overrides ("all devices")
    lx.set_explicit_donation(False)
    assert lx.explicit_donation_enabled(lx.device(0)) is False
    lx.set_explicit_donation(True)
    lx.set_explicit_donation(False, device=lx.device(0))
    assert lx.explicit_donation_enabled() is True and lx.explicit_donation_enabled(dev) is False
    t2 = c1.to(dev)
    assert lx.set_buffer_donation(t2)
    z = t2 * 3
    lx.sync_tensors([z], donate_inplace=False)
    assert not lx.is_donated(t2)
    with lx.explicit_donation(True, device=dev) as prev:
        assert prev is False
        assert lx.explicit_donation_enabled(dev)
    assert lx.explicit_donation_enabled(dev) is False
    with pytest.raises(TypeError):
        lx.set_explicit_donation(1)
    with pytest.raises(ValueError):
        lx.set_explicit_donation(True, device="cpu")
    assert_close(y, c0 + c1)
    assert_close(z, c1 * 3)


def test_aliasing_switch_per_device_and_global(dev):
    assert lx.aliasing_enabled() and lx.aliasing_enabled(dev)
    lx.set_aliasing(False, device=lx.device(0))
    assert lx.aliasing_enabled() is True and lx.aliasing_enabled(dev) is False
    c = rand(5, seed=70)
    t = c.to(dev)
    t.mul_(2)
    lx.sync()
    assert lx.debug.donation_report().donors == 0
    assert "aliasing is off" in lx.debug.donation_report().params[0]["reason"]
    lx.set_aliasing(True)  # global: clears the per-device override
    assert lx.aliasing_enabled(dev)
    t.mul_(2)
    lx.sync()
    assert lx.debug.donation_report().donors == 1
    assert_close(t, c * 4)


def test_explicit_donation_at_host_read_only_when_enabled(dev):
    c = rand(3, seed=80)
    t0 = c.to(dev)
    assert lx.set_buffer_donation(t0)
    y = t0 + 1
    assert_close(y.cpu(), c + 1)  # explicit donation off: .cpu() donates nothing
    assert not lx.is_donated(t0)
    assert "not enabled" in lx.debug.donation_report().params[0]["reason"]
    with lx.explicit_donation(True):
        z = t0 * 3
        assert_close(z.cpu(), c * 3)  # on: a host read donates explicit donors too
    assert lx.is_donated(t0)
    assert_close(y, c + 1)


def test_save_never_donates(dev, tmp_path):
    c0, c1 = rand(3, seed=90), rand(3, seed=91)
    t0, t1 = c0.to(dev), c1.to(dev)
    assert lx.set_buffer_donation(t0)
    t1.add_(1)
    y = t0 * 2
    with lx.explicit_donation(True):
        lx.save({"t0": t0, "y": y, "list": [t1]}, str(tmp_path / "ckpt.pt"))
    assert not lx.is_donated(t0)
    assert lx.get_buffer_donation(t0) is True
    loaded = torch.load(str(tmp_path / "ckpt.pt"))
    assert_close(loaded["t0"], c0)
    assert_close(loaded["y"], c0 * 2)
    assert_close(loaded["list"][0], c1 + 1)
    assert loaded["t0"].device.type == "cpu"
    assert_close(t0, c0)


def test_donation_report_reasons(dev):
    c = rand(4, seed=100)
    # "held by": an in-place update of a buffer another tensor holds
    a = c.to(dev)
    other = torch.empty(4, device=dev)
    other.copy_(a)
    a.add_(1)
    lx.sync()
    report = lx.debug.donation_report()
    assert report.donors == 0 and "held by" in report.params[0]["reason"]
    assert "held by" in str(report) and report.kind == "step barrier"
    # "read-only": constants pinned by the runtime (no public way to make one: set the bit)
    b = c.to(dev)
    b._st.value.data.read_only = True
    b.add_(1)
    lx.sync()
    assert "read-only" in lx.debug.donation_report().params[0]["reason"]
    # "not enabled": explicit donor at a partial sync with explicit donation off
    d = c.to(dev)
    assert lx.set_buffer_donation(d)
    e = d * 2
    lx.sync_tensors([e])
    assert "not enabled" in lx.debug.donation_report().params[0]["reason"]
    # "aliasing is off"
    lx.set_aliasing(False)
    d.add_(1)
    lx.sync()
    assert "aliasing is off" in lx.debug.donation_report().params[0]["reason"]
    lx.set_aliasing(True)
    # a donated parameter says why
    d.add_(1)
    lx.sync()
    params = lx.debug.donation_report().params
    assert params[0]["donated"] and params[0]["kind"] == "automatic"
    assert_close(other, c)
    assert_close(a, c + 1)
    assert_close(b, c + 1)
    assert_close(e, c * 2)
    assert_close(d, c + 2)


def test_partial_sync_without_donate_inplace_does_not_alias(dev):
    c = rand(5, seed=110)
    t = c.to(dev)
    t.add_(1)
    lx.sync_tensors([t], donate_inplace=False)
    r = lx.debug.donation_report()
    assert r.donors == 0 and r.kind == "partial sync"
    assert "does not donate automatically" in r.params[0]["reason"]
    t.add_(1)
    lx.sync_tensors([t])  # donate_inplace=True (default): safe here, donated
    assert lx.debug.donation_report().donors == 1
    assert_close(t, c + 2)


def test_config_flags_not_in_key_only_the_donor_set(dev):
    cs = [rand(4, seed=120 + i) for i in range(4)]
    x0, x1, x2, x3 = (c.to(dev) for c in cs)
    # same graph, explicit donation off vs on with nothing marked: one executable
    y0 = x0 * 2
    lx.sync_tensors([y0], donate_inplace=False)
    with lx.explicit_donation(True):
        y1 = x1 * 2
        lx.sync_tensors([y1], donate_inplace=False)
    assert alias2() == (1, 0.0) and counter("CachedCompile") == 1
    # in-place step: automatic donor alone, or automatic + explicit on the same buffer:
    # same donor set, same executable
    x2.add_(1)
    lx.sync()
    assert lx.set_buffer_donation(x3)
    x3.add_(1)
    lx.sync()
    assert alias2() == (2, 1.0) and counter("CachedCompile") == 2
    assert_close(y0, cs[0] * 2)
    assert_close(y1, cs[1] * 2)
    assert_close(x2, cs[2] + 1)
    assert_close(x3, cs[3] + 1)


def test_graph_hash_ignores_data_values(dev):
    a, b = rand(3, 3, seed=130).to(dev), rand(3, 3, seed=131).to(dev)
    h1 = lx.graph_hash([torch.sin(a) @ a])
    h2 = lx.graph_hash([torch.sin(b) @ b])
    h3 = lx.graph_hash([torch.sin(a) @ b])  # different wiring
    h4 = lx.graph_hash([torch.cos(a) @ a])  # different op
    assert h1 == h2
    assert len({h1, h3, h4}) == 3
    assert re.fullmatch(r"[0-9a-f]{16}", h1), h1   # the 64-bit key in hex
