"""dtype support and PyTorch's type promotion, value by value against eager."""
import itertools

import pytest
import torch

import lazyxla as lx
from helpers import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool, torch.float64]


def _sample(dtype, shape=(3, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


@pytest.mark.parametrize("a_dtype,b_dtype", list(itertools.combinations_with_replacement(DTYPES, 2)))
def test_binary_promotion(a_dtype, b_dtype, dev):
    a, b = _sample(a_dtype, seed=1), _sample(b_dtype, (4,), seed=2)
    da, db = a.to(dev), b.to(dev)
    tol = dict(rtol=1e-2, atol=1e-2) if torch.float16 in (a_dtype, b_dtype) or \
        torch.bfloat16 in (a_dtype, b_dtype) else dict(rtol=1e-5, atol=1e-6)
    for op in (torch.add, torch.mul, torch.maximum, torch.eq, torch.lt):
        if a_dtype == torch.bool and b_dtype == torch.bool and op is torch.add:
            continue
        assert_close(op(da, db), op(a, b), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_python_scalar_promotion(dtype, scalar, dev):
    a = _sample(dtype)
    d = a.to(dev)
    tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else dict(rtol=1e-6, atol=1e-6)
    if dtype == torch.bool and isinstance(scalar, bool):
        assert_close(d & scalar, a & scalar)
        return
    assert_close(d * scalar, a * scalar, **tol)
    assert_close(d + scalar, a + scalar, **tol)
    assert_close(d > scalar, a > scalar)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_and_reductions(dtype, dev):
    a = _sample(dtype)
    d = a.to(dev)
    assert d.dtype == dtype
    assert_close(d, a)
    if dtype != torch.bool:
        tol = dict(rtol=2e-2, atol=2e-2) if dtype in (torch.float16, torch.bfloat16) else dict(rtol=1e-5, atol=1e-5)
        assert_close(d.sum(), a.sum(), **tol)
        assert_close(d.sum(0), a.sum(0), **tol)
        assert_close(d.amax(1), a.amax(1))
    assert_close(d.to(torch.float32), a.to(torch.float32))
    assert_close(d.to(torch.int64), a.to(torch.int64))


def test_zero_dim_host_tensor_operand_is_a_runtime_value(dev):
    x = torch.ones(3, device=dev)
    lx.sync()
    for i, v in enumerate((0.5, 1.5, 3.0)):
        y = x * torch.tensor(v)
        lx.sync()
        assert y.tolist() == [v] * 3
        if i == 0:
            lx.metrics.clear_counters()
    assert lx.metrics.counter_value("UncachedCompile") is None


def test_int_division_and_modes(dev):
    a = torch.tensor([7, -7, 9, -9])
    b = torch.tensor([2, 2, -4, -4])
    d, e = a.to(dev), b.to(dev)
    assert_close(d / e, a / b)
    assert_close(torch.div(d, e, rounding_mode="floor"), torch.div(a, b, rounding_mode="floor"))
    assert_close(torch.div(d, e, rounding_mode="trunc"), torch.div(a, b, rounding_mode="trunc"))
    assert_close(d % e, a % b)
    assert_close(d // 2, a // 2)
