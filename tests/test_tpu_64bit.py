"""The TPU backend's 64-bit rule (runtime/backend/accelerators.py), run on the CPU under the
TPU backend's policies: 64-bit types are held and computed in 32 bits, lifted scalars
travel in 32 bits, no graph of a training step has a 64-bit type, values stay eager's to
float32 rounding, and out-of-range integers are refused rather than wrapped."""
from __future__ import annotations

import re

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from lazyxla.errors import StorageRangeError
from lazyxla.runtime import storage_dtypes

from helpers import backend_as, float32_math_tolerance, inexact_float32_math

_WIDE = re.compile(r"\b(f64|s64|u64)\[")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Flatten(), torch.nn.Linear(64, 32),
                               torch.nn.GELU(), torch.nn.Linear(32, 5))


def _steps(model, ids, labels, fused: bool, steps: int, hlo: list | None = None) -> list:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused, foreach=None if fused else False)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 10)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids), labels)
        loss.backward()
        if hlo is not None and ids.device.type != "cpu":
            hlo.append(lx.debug.hlo_text())
        opt.step()
        schedule.step()
        losses.append(loss.detach())
        if ids.device.type != "cpu":
            lx.sync()
    return [float(v) for v in losses]


@pytest.mark.parametrize("fused", [True, False])
def test_a_training_step_has_no_64_bit_type_on_the_tpu(dev, fused):
    # fused AdamW takes its bias corrections in float64 (as ATen's kernel does) and the
    # schedule's learning rate is a Python float: on the TPU both compute in 32 bits
    ids, labels = torch.randint(0, 50, (8, 4)), torch.randint(0, 5, (8,))
    eager = _steps(_model(), ids, labels, fused, steps=4)
    with backend_as("tpu"):
        hlo: list = []
        lazy = _steps(_model().to(dev), ids.to(dev), labels.to(dev), fused, steps=4, hlo=hlo)
        assert hlo and not any(_WIDE.search(text) for text in hlo), "a 64-bit type in a TPU step graph"
    # on a TPU the float32 division of AdamW's update is an approximation (inexact_float32_math)
    tol = dict(rtol=2e-4, atol=2e-5) if inexact_float32_math() else dict(rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(lazy, eager, **tol)


def test_jax_algorithms_lower_without_x64_under_the_rule(dev):
    """JAX's own algorithms (QR, the matrix exponential, the TPU's SVD) expand when the
    program is lowered: under x64 their loop counters and constants were 64-bit, and
    XLA:TPU's compiler aborted the process on the SVD's (the suite's chunk 1 on the chip).
    Under the rule they are traced and lowered with x64 off (compile/without_x64.py)."""
    torch.manual_seed(0)
    general, square = torch.randn(2, 5, 3), torch.randn(4, 4) * 0.3
    cases = [(torch.linalg.qr, general), (torch.linalg.matrix_exp, square), (torch.linalg.pinv, general)]
    with backend_as("tpu"):
        for fn, x in cases:
            out, expected = fn(x.to(dev)), fn(x)
            outs, expected = (list(out), list(expected)) if isinstance(out, tuple) else ([out], [expected])
            assert not _WIDE.search(lx.debug.hlo_text(outs)), f"a 64-bit type in {fn.__name__}'s graph"
            for got, want in zip(outs, expected):
                torch.testing.assert_close(got.cpu(), want, **float32_math_tolerance(1e-5, 1e-5))
    with backend_as("cpu"):   # no rule: x64, and the exponential's loop counters are int64
        assert _WIDE.search(lx.debug.hlo_text([torch.linalg.matrix_exp(square.to(dev))]))


def test_the_without_x64_primitive_keeps_64_bit_types_out_traced_and_eagerly():
    """A loop's counter is int64 when JAX expands it under x64, even where the loop was
    traced without x64; through the primitive it is int32 in the lowered program, and the
    rule runs op by op too (no trace around it)."""
    import jax
    import jax.numpy as jnp
    from lazyxla.compile.without_x64 import without_x64
    from lazyxla.patches import in_x64
    rule = without_x64(lambda ctx, a: jax.lax.fori_loop(0, 3, lambda i, x: x + i, a))
    with in_x64():
        a = jnp.ones(3, jnp.float32)
        program = jax.jit(lambda v: rule(None, v))
        assert not re.search(r"\b(i64|f64)\b", program.lower(a).as_text())
        assert program(a).tolist() == rule(None, a).tolist() == [4.0, 4.0, 4.0]


def test_64_bit_values_keep_their_logical_dtype_and_value(dev):
    with backend_as("tpu"):
        n = torch.arange(6).to(dev) * 3 + 2**30
        x = torch.linspace(0, 1, 5, dtype=torch.float64).to(dev) / 3
        assert n.dtype == torch.int64 and x.dtype == torch.float64
        assert lx.debug.ir_nodes([n])[-1].device_dtype == torch.int32
        assert torch.equal(n.cpu(), torch.arange(6) * 3 + 2**30)
        torch.testing.assert_close(x.cpu(), torch.linspace(0, 1, 5, dtype=torch.float64) / 3,
                                   rtol=1.2e-7, atol=0)   # float32's rounding


def test_integers_beyond_32_bits_are_refused_not_wrapped(dev):
    # StorageRangeError is an OverflowError: code catching that keeps working
    with backend_as("tpu"):
        with pytest.raises(StorageRangeError, match="LAZYXLA_STORAGE_DTYPES=none"):
            torch.tensor([1, 2**40]).to(dev)
        n = torch.arange(3).to(dev)
        with pytest.raises(StorageRangeError, match="does not fit int32"):
            (n + 2**40).cpu()
        # an int64 random_() draws int32's whole non-negative range there (it wrapped to
        # negative values before); bounds beyond it are refused
        drawn = torch.empty(4000, dtype=torch.int64, device=dev).random_().cpu()
        assert drawn.min() >= 0 and drawn.max() > 2**30
        with pytest.raises(lx.FailedOpError, match="random_.*LAZYXLA_STORAGE_DTYPES=none"):
            torch.empty(4, dtype=torch.int64, device=dev).random_(0, 2**40).cpu()
        assert 0 <= int(torch.empty(1, dtype=torch.int64, device=dev).random_(0, 2**31).cpu()) < 2**31


def test_the_rule_can_be_turned_off(dev):
    with backend_as("tpu"), config.override(storage_dtypes="none"):
        assert storage_dtypes.current() is None
        n = torch.tensor([1, 2**40]).to(dev)
        assert torch.equal((n + 1).cpu(), torch.tensor([2, 2**40 + 1]))
        x = torch.ones(3, dtype=torch.float64).to(dev)
        assert "f64[" in lx.debug.hlo_text([x / 3])
    with backend_as("tpu"):
        assert storage_dtypes.current().storage(torch.float64) == torch.float32
    if lx.platform() == "cpu":
        assert storage_dtypes.current() is None   # the CPU backend keeps 64-bit types


def test_complex128_is_held_and_computed_as_complex64(dev):
    # complex128 is two float64: a graph of it on the TPU was emulated, and made from a
    # complex64 value (a fill, a Python complex) it aborted XLA's compile and the process
    z = torch.tensor([1 + 2j, -0.1j, 3], dtype=torch.complex128)
    with backend_as("tpu"):
        d = z.to(dev)
        out = torch.zeros(3, 2, dtype=torch.complex128, device=dev) + d[:, None].real * (0.5 - 1j) + d.sum() * 1.1j
        assert d.dtype == out.dtype == torch.complex128
        text = lx.debug.hlo_text([out])
        assert "c128[" not in text and "f64[" not in text, text
        expected = torch.zeros(3, 2, dtype=torch.complex128) + z[:, None].real * (0.5 - 1j) + z.sum() * 1.1j
        assert out.cpu().dtype == torch.complex128
        torch.testing.assert_close(out.cpu(), expected, rtol=1.2e-7, atol=1e-7)   # complex64's rounding


@pytest.mark.parametrize("name", ["normal_", "pow 1j", "rpow", "where 1j", "div"])
def test_complex64_graphs_have_no_complex128_under_the_rule(dev, name):
    # a Python complex inside a lowering (eager's mean on both parts of a complex normal, a
    # complex exponent) was made as complex128 and converted: a complex128 <-> complex64
    # convert aborts XLA:TPU's compile and the process with it
    ops = {"normal_": lambda t: torch.empty_like(t).normal_(1.0, 2.0) * 0 + t,
           "pow 1j": lambda t: t ** 1j + t ** (1 + 1j), "rpow": lambda t: (1 + 2j) ** t,
           "where 1j": lambda t: torch.where(t.real > 0, t, 1j), "div": lambda t: t / (2 - 1j)}
    z = torch.randn(3, 4, dtype=torch.complex64) + 0.5
    tolerance = float32_math_tolerance(1e-5, 1e-5)   # the device's own: read outside the pretence
    with backend_as("tpu"):
        out = ops[name](z.to(dev))
        text = lx.debug.hlo_text([out])
        assert "c128[" not in text, [line for line in text.splitlines() if "c128[" in line][:3]
        torch.testing.assert_close(out.cpu(), ops[name](z), **tolerance)


def test_random_draws_run_under_the_rule_with_the_same_streams(dev):
    # a draw's seed is a lifted int: drawn from 62 bits it could not travel in int32, and
    # every random op (dropout) raised OverflowError under the TPU's rule
    def draws():
        torch.manual_seed(0)
        x = torch.ones(64, device=dev)
        return [t.cpu() for t in (torch.nn.functional.dropout(x, 0.5), torch.randn(8, device=dev),
                                  torch.randint(0, 10, (8,), device=dev))]
    here = draws()
    with backend_as("tpu"):
        narrowed = draws()
    for a, b in zip(here, narrowed):
        assert torch.equal(a, b)
    assert 10 < int((here[0] == 0).sum()) < 54 and here[2].dtype == torch.int64


def test_a_users_jax_function_is_traced_without_x64_under_the_rule(dev):
    """Under the rule an `lx.call_jax` body (and its backward) computes in 32 bits, as JAX
    runs on a TPU: its Python ints are int32 there (a Pallas kernel's block indices, which
    Mosaic refuses as int64). torch still reports eager's dtypes."""
    import jax.numpy as jnp
    traced = []

    def fn(x, w):
        traced.append(jnp.asarray(0).dtype)   # what a Python int becomes where fn is traced
        return x * 2 + jnp.arange(x.shape[0]), w * w

    x, w = torch.arange(4, dtype=torch.int64), torch.tensor([0.5, -1.5], dtype=torch.float64)
    with backend_as("tpu"):
        wl = w.to(dev).requires_grad_()
        y, z = lx.call_jax(fn, x.to(dev), wl)
        assert (y.dtype, z.dtype) == (torch.int64, torch.float64)
        z.sum().backward()
        hlo = lx.debug.hlo_text([y, z, wl.grad])
        assert not _WIDE.search(hlo), "a 64-bit type in a call_jax body under the rule"
        assert y.cpu().tolist() == [0, 3, 6, 9] and z.cpu().tolist() == [0.25, 2.25]
        assert wl.grad.cpu().tolist() == [1.0, -3.0]
        assert traced[-1] == jnp.int32
    with backend_as("cpu"):   # no rule: JAX's x64 mode, as eager's dtypes need
        y, _ = lx.call_jax(fn, x.to(dev), w.to(dev))
        assert y.cpu().tolist() == [0, 3, 6, 9] and traced[-1] == jnp.int64
