"""Shared test helpers: compare lazyxla results with eager CPU PyTorch, and what differs
when the suite runs on an accelerator (child processes, sockets, precision)."""
from __future__ import annotations

import contextlib
import functools
import os
import socket
import types
from typing import Callable

import torch

import lazyxla as lx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def to_dev(value, dev):
    if isinstance(value, torch.Tensor):
        t = value.detach().to(dev)
        return t.requires_grad_(value.requires_grad) if value.is_floating_point() or value.is_complex() else t
    if isinstance(value, (list, tuple)):
        return type(value)(to_dev(v, dev) for v in value)
    return value


def to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    """`actual` (a device result) against eager's `expected` within rtol/atol, widened to
    the platform's float32 rounding where it has its own (`platform_tolerance`; CPU: none)."""
    if isinstance(expected, torch.Tensor):
        actual = to_cpu(actual)
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
        torch.testing.assert_close(actual, expected, equal_nan=True, **platform_tolerance(expected, rtol, atol))
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol, atol)
    else:
        assert actual == expected or (actual != actual and expected != expected), f"{actual} != {expected}"


def check_op(fn: Callable, *inputs, rtol=1e-5, atol=1e-6, backward=None):
    """Run `fn` on CPU inputs and on lazyxla copies; compare outputs and, for
    float/complex inputs that require grad, gradients of the real part of
    sum(outputs * fixed weights)."""
    dev = lx.device()
    cpu_in = [i.detach().clone().requires_grad_(i.requires_grad) if isinstance(i, torch.Tensor) else i
              for i in inputs]
    dev_in = [to_dev(i, dev) for i in inputs]
    expected = fn(*cpu_in)
    actual = fn(*dev_in)
    assert_close(actual, expected, rtol, atol)
    wants_grad = [i for i in cpu_in if isinstance(i, torch.Tensor) and i.requires_grad]
    if backward is False or not wants_grad:
        return actual
    exp_outs = [o for o in (expected if isinstance(expected, (list, tuple)) else [expected])
                if isinstance(o, torch.Tensor) and o.requires_grad]
    act_outs = [o for o in (actual if isinstance(actual, (list, tuple)) else [actual])
                if isinstance(o, torch.Tensor) and o.requires_grad]
    if not exp_outs:  # e.g. argmax: nothing differentiable came out
        return actual
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in exp_outs]
    sum((torch.real((o * w).sum()) for o, w in zip(exp_outs, weights)), torch.zeros(())).backward()
    sum((torch.real((o * w.to(dev)).sum()) for o, w in zip(act_outs, weights)), torch.zeros((), device=dev)).backward()
    for c, d in zip(cpu_in, dev_in):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            assert d.grad is not None, "missing gradient"
            assert_close(d.grad, c.grad, rtol=max(rtol, 1e-4), atol=max(atol, 1e-5))
    return actual


def randn_grad(*shape, dtype=torch.float32):
    """A random leaf tensor that requires grad."""
    return torch.randn(shape).to(dtype).requires_grad_()


def assert_no_fallback(*names):
    """None of the ops `names` ran on the host (their aten:: counters are unset)."""
    for name in names:
        assert lx.metrics.counter_value(f"aten::{name}") is None, f"aten::{name} ran on the host"


def host_fallbacks() -> list[str]:
    """Names of the `aten::<op>` counters that are set: ops that ran on the host."""
    return [n for n in lx.metrics.counter_names() if n.startswith("aten::")]


def rand(*shape, seed=None, dtype=torch.float32):
    """A reproducible random CPU tensor (seed defaults to one derived from the shape)."""
    gen = torch.Generator().manual_seed(seed if seed is not None else hash(shape) & 0xFFFF)
    return torch.randn(*shape, generator=gen).to(dtype)


def materialised(dev, *hosts):
    """`hosts` moved to `dev` and materialised by a step barrier, with the metrics
    cleared after it: the starting point of most donation scenarios."""
    tensors = tuple(h.to(dev) for h in hosts)
    lx.sync()
    lx.metrics.clear_all()
    return tensors


def alias2():
    """(graphs compiled, donors) of the InputOutputAliasCount metric, or None."""
    a = lx.metrics.metric_data("InputOutputAliasCount")
    return None if a is None else (a[0], a[1])


def counter(name):
    return lx.metrics.counter_value(name) or 0


def run_on_host_devices(script: str, devices: int = 8, timeout: int = 600):
    """Run Python `script` in a fresh interpreter with `devices` forced host devices (the
    device count is fixed when JAX starts) and this checkout's lazyxla; the finished process."""
    import subprocess
    import sys
    env = child_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


# -- the platform under the suite: CPU in CI, a TPU in issue 45's runs --------------------------

EXPECTTEST_REASON = ("torch.testing._internal (PyTorch's OpInfo database) imports expecttest, "
                     "which is not installed (pip install expecttest)")

def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python process that needs no accelerator: JAX on the CPU
    (JAX_PLATFORMS=cpu), this checkout first on PYTHONPATH, then `extra`. On a TPU machine
    the suite's own process holds the chip once a test has used it, and a second process
    that opens it fails ("libtpu multi-process lockfile"); on CPU it changes nothing."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path, **extra}


@functools.lru_cache(maxsize=None)
def sockets_unavailable() -> str | None:
    """Why no process here can reach another over TCP, or None: tried, not assumed (the
    TPU machine of issue 45 has no TCP/UDP sockets at all)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=5):
                pass
    except OSError as e:
        return (f"this machine has no TCP sockets ({e}): processes that talk to each other "
                "(jax.distributed, gloo, multi-host runs) cannot run here")
    return None


def needs_sockets(test):
    """Skip `test` (a test function or class) where processes cannot talk over TCP."""
    import pytest
    reason = sockets_unavailable()
    return pytest.mark.skipif(reason is not None, reason=reason or "")(test)


def reduced_matmul_precision(level: str | None = None) -> bool:
    """Whether float32 matrix products at JAX precision `level` (None: JAX's default, which
    code written in JAX and `lx.call_jax` bodies get) lose bits on this platform: a TPU
    runs "default" as one bf16 pass and "high" as three; XLA:CPU computes float32 in
    float32 at every level."""
    import jax
    if lx.platform() == "cpu":
        return False
    level = level or jax.config.jax_default_matmul_precision or "default"
    return level.lower() not in ("highest", "float32")


def inexact_float32_math() -> str | None:
    """Why float32 division, square root, remainder, exp, log and tanh here may be off the
    correctly rounded result eager computes, or None where they are not (CPU)."""
    if lx.platform() != "tpu":
        return None
    return ("the TPU computes float32 division, sqrt, remainder, exp, log and tanh from hardware "
            "approximations, off the correctly rounded value by an ulp (division) to thousands "
            "(log, tanh), JAX's own ops too (scripts/tpu/float32_math.py)")


def float32_math_tolerance(rtol: float, atol: float, floor: float = 2e-4) -> dict:
    """rtol/atol for a float32 result built from exp, log, tanh or division, compared with
    eager CPU: as given where those are correctly rounded (CPU); `floor` at least where they
    are approximations (`inexact_float32_math`). Measured on the TPU v5e
    (scripts/tpu/float32_math.py, 2026-12-08): log and log1p up to 4,000 ulps (2.4e-4
    relative), tanh 1,400 (1.6e-4), exp 108, division 1.5. One such op is within the default
    floor; a recurrence through tanh and its derivative, trained a few steps, compounds it
    (its tests pass a wider floor)."""
    if not inexact_float32_math():
        return {"rtol": rtol, "atol": atol}
    return {"rtol": max(rtol, floor), "atol": max(atol, floor)}


def as_held(t: torch.Tensor) -> torch.Tensor:
    """CPU tensor `t` as the device here gives it back: rounded through the dtype the
    storage policy holds its dtype in (the TPU's 64-bit rule: complex128 as complex64,
    float64 as float32), unchanged where the dtype is held as itself (always on CPU)."""
    from lazyxla.runtime import storage_dtypes
    held = storage_dtypes.storage_for(t.dtype)
    return t if held == t.dtype else t.to(held).to(t.dtype)


def skip_if_narrowed(*dtypes: torch.dtype) -> None:
    """Skip the calling test where the device holds one of `dtypes` in a narrower dtype (the
    TPU's 64-bit rule): a test of that dtype's own precision or range cannot pass there."""
    from lazyxla.runtime import storage_dtypes
    import pytest
    for dtype in dtypes:
        held = storage_dtypes.storage_for(dtype)
        if held != dtype:
            pytest.skip(f"{dtype} is held as {held} on this platform (the TPU's 64-bit rule: "
                        "docs/design.md, '64-bit types on the TPU')")


def matmul_tolerance(expected: torch.Tensor, rtol: float, atol: float, level: str | None = None) -> dict:
    """rtol/atol for comparing a float32 result of matrix products at `level` (see
    `reduced_matmul_precision`) with eager CPU: as given where the platform computes them
    in float32 (always on CPU); bf16's otherwise, relative to the result's scale, since
    rounding the inputs to 8 bits errs in proportion to the products' magnitude, not to
    each output element's (an output near 0 can be the sum of large products)."""
    if not reduced_matmul_precision(level):
        return {"rtol": rtol, "atol": atol}
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    bf16_rtol = 1.6e-2   # torch.testing's own bfloat16 rtol: 2**-6
    return {"rtol": max(rtol, bf16_rtol), "atol": max(atol, bf16_rtol * scale)}


def platform_tolerance(expected: torch.Tensor, rtol: float, atol: float) -> dict:
    """rtol/atol for a floating result computed here against eager CPU: as given on CPU;
    where the platform's float32 exp, log and division are approximations
    (`float32_math_tolerance`) or graphs now compute float32 products at a reduced level
    (`matmul_tolerance` at `lx.matmul_precision()`: compat's "default", one bf16 pass on a
    TPU), the wider of those. Results of many steps of training compound both (a TPU's
    "highest" level is six bf16 passes, not float32's rounding)."""
    if not (expected.is_floating_point() or expected.is_complex()) or not inexact_float32_math():
        return {"rtol": rtol, "atol": atol}
    widened = float32_math_tolerance(rtol, atol)
    reduced = matmul_tolerance(expected, rtol, atol, lx.matmul_precision())
    return {k: max(widened[k], reduced[k]) for k in widened}


def fake_buffer(shape: tuple = (2, 3), dtype: torch.dtype = torch.float32, stored_dtype=None):
    """What IR sees of a device buffer (ir/graph.DeviceBuffer), without one: for building
    graphs by hand (tests of ir/)."""
    return types.SimpleNamespace(shape=shape, dtype=dtype, stored_dtype=stored_dtype or dtype,
                                 donated_in=None, sharding=None)


@contextlib.contextmanager
def backend_as(platform: str):
    """`platform`'s backend policies (runtime/backend/) over JAX's CPU devices for the block."""
    from lazyxla.runtime import backend
    saved = backend._CURRENT.backend
    try:
        yield backend.select(platform)
    finally:
        backend._CURRENT.backend = saved
