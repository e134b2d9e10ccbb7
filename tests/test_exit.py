"""Interpreter exit with pending work or in-flight executions neither hangs nor crashes."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import lazyxla as lx

from helpers import child_env

PRELUDE = """
import torch, lazyxla as lx
dev = lx.device()
"""

SCRIPTS = {
    # an execution still in flight when the interpreter exits
    "in_flight": """
        a = torch.randn(512, 512).to(dev)
        for _ in range(8):
            a = torch.tanh(a @ a) + 1
        lx.sync(wait=False)
    """,
    # pending (never synced) tensors at exit, some of them updated in place
    "pending": """
        w = torch.ones(256, 256).to(dev)
        w.mul_(2).add_(1)
        v = w[1:3]
        v.fill_(0)
        y = (w @ w).sum()
    """,
    # in-flight execution, then more pending work on its results
    "in_flight_then_pending": """
        w = torch.randn(256, 256).to(dev)
        w.mul_(2)
        lx.sync(wait=False)
        z = w @ w
    """,
    # a donated tensor still referenced, and a marked one
    "donated": """
        a = torch.ones(64).to(dev)
        lx.set_buffer_donation(a)
        b = a * 2
        lx.sync(wait=False)
        assert lx.is_donated(a)
        c = torch.zeros(8).to(dev)
        lx.set_buffer_donation(c)
    """,
    # a model and optimizer mid-step (autograd graph alive)
    "training": """
        m = torch.nn.Linear(32, 32).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = m(torch.randn(4, 32).to(dev)).sum()
        loss.backward()
        opt.step()
        lx.sync(wait=False)
        loss2 = m(torch.randn(4, 32).to(dev)).sum()
    """,
    # a daemon thread still tracing and syncing when the main thread exits
    "daemon_thread": """
        import threading, time
        started = threading.Event()
        def loop():
            x = torch.ones(128).to(dev)
            while True:
                x.add_(1)
                lx.sync(wait=False)
                started.set()
        threading.Thread(target=loop, daemon=True).start()
        started.wait(60)
        time.sleep(0.05)
    """,
    # a daemon thread blocked in wait_device_ops (outside the runtime lock) at exit
    "daemon_thread_waiting": """
        import threading
        started = threading.Event()
        def loop():
            x = torch.randn(384, 384).to(dev)
            while True:
                x = torch.tanh(x @ x)
                lx.sync(wait=True)
                started.set()
        threading.Thread(target=loop, daemon=True).start()
        started.wait(60)
    """,
    # an execution still running whose every tensor the program dropped: no output to wait on
    # by reference, and XLA:CPU's threads running it while the process tore down segfaulted
    "in_flight_dropped": """
        a = torch.randn(768, 768).to(dev)
        for _ in range(16):
            a = torch.tanh(a @ a)
        lx.sync(wait=False)
        del a
    """,
    # explicit exit with work in flight
    "sys_exit": """
        import sys
        x = torch.randn(256, 256).to(dev)
        y = x @ x
        lx.sync(wait=False)
        sys.exit(0)
    """,
}


def _run(body: str, timeout: int = 180):
    script = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, env=child_env(PYTHONWARNINGS="ignore"))


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_exit_does_not_hang_or_crash(name):
    try:
        proc = _run(SCRIPTS[name])
    except subprocess.TimeoutExpired:
        pytest.fail(f"interpreter exit hung ({name})")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "Exception ignored" not in out, out
    assert "Fatal Python error" not in out and "Segmentation fault" not in out, out


def test_exit_after_a_user_error_reports_only_that_error():
    proc = _run("""
        x = torch.randn(64, 64).to(dev)
        y = x @ x
        lx.sync(wait=False)
        raise ValueError("user error")
    """)
    assert proc.returncode == 1
    assert "ValueError: user error" in proc.stderr
    assert proc.stderr.count("Traceback") == 1, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr


def test_a_wait_covers_executions_whose_tensors_were_dropped(dev):
    """`lx.sync(wait=True)` (and the exit handler, through the same `wait_all`) waits for an
    execution after the program dropped every tensor it made."""
    a = torch.randn(64, 64).to(dev)
    lx.sync(wait=True)
    b = torch.tanh(a @ a)
    lx.sync(wait=False)
    del a, b
    lx.metrics.clear_all()
    lx.sync(wait=True)
    assert lx.metrics.counter_value("DeviceWait") == 1
