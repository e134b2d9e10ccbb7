"""Two local devices (JAX's CPU backend split in two): one graph per device per
sync, per-device donation switches, cross-device copies. Runs in a subprocess
because the device count is fixed when JAX starts."""
import subprocess
import sys
import textwrap
from helpers import child_env

SCRIPT = textwrap.dedent("""
    import torch, lazyxla as lx
    assert lx.device_count() == 2, lx.devices()
    d0, d1 = lx.device(0), lx.device(1)
    a = torch.ones(3, device=d0) * 2
    b = torch.ones(3, device=d1) * 3
    lx.sync()
    assert lx.metrics.counter_value("ExecuteComputation") == 2  # one graph per device
    assert a.tolist() == [2.0] * 3 and b.tolist() == [3.0] * 3
    c = b.to(d0)
    assert c.device == d0 and (a + c).tolist() == [5.0] * 3
    try:
        a + b
    except RuntimeError as e:
        assert "lazyxla:0" in str(e) and "lazyxla:1" in str(e)
    else:
        raise AssertionError("mixing devices must fail")
    z = torch.zeros_like(a, device=d1)          # device= names where the result lives
    assert z.device == d1 and z.tolist() == [0.0] * 3
    lx.set_explicit_donation(True, device=d1)
    assert not lx.explicit_donation_enabled(d0) and lx.explicit_donation_enabled(d1)
    x0, x1 = torch.randn(3).to(d0), torch.randn(3).to(d1)
    assert lx.set_buffer_donation([x0, x1]) == [True, True]
    y0, y1 = x0 + 1, x1 + 1
    lx.sync_tensors([y0, y1])
    assert not lx.is_donated(x0) and lx.is_donated(x1)
    with lx.explicit_donation(False):  # device=None: all devices, restored after
        assert not lx.explicit_donation_enabled(d1)
    assert lx.explicit_donation_enabled(d1)
    lx.set_aliasing(False, device=d0)
    w0, w1 = torch.ones(4).to(d0), torch.ones(4).to(d1)
    w0.add_(1); w1.add_(1)
    lx.sync()
    donors = sorted(s[1] for s in lx.metrics.metric_data("InputOutputAliasCount")[2][-2:])
    assert donors == [0.0, 1.0], donors
    print("OK")
""")


def test_two_devices():
    env = child_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OK" in out.stdout
