"""dtype support and PyTorch's type promotion, value by value against eager."""
import itertools

import pytest
import torch

import lazyxla as lx
from helpers import assert_close, skip_if_narrowed

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


_U64 = torch.tensor([0, 1, 7, 2**63 + 5, 2**64 - 1], dtype=torch.uint64)
_U64_OPS = {  # what eager CPU runs for uint64 (a "shell" dtype: add, lt, max, neg, ... are refused)
    "mul": lambda a, b: a * b, "div": torch.div, "eq": torch.eq, "ne": torch.ne,
    "and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor,
    "sum": lambda a, b: a.sum(), "prod": lambda a, b: b.prod(), "cumsum": lambda a, b: a.cumsum(0),
    "sort": lambda a, b: a.sort().values, "cat": lambda a, b: torch.cat([a, b[1:3]]),
    "to_int64": lambda a, b: b.to(torch.int64), "to_float64": lambda a, b: a.to(torch.float64),
    "from_int64": lambda a, b: b.to(torch.int64).to(torch.uint64),
    "zeros_like": lambda a, b: torch.zeros_like(a), "full_big": lambda a, b: torch.full_like(a, 2**63 + 3),
    "fill_big": lambda a, b: a.clone().fill_(2**64 - 2), "mul_big": lambda a, b: a * (2**63 + 1),
    "eq_big": lambda a, b: a == 2**64 - 1, "and_big": lambda a, b: a & (2**63 + 4),
}


@pytest.mark.parametrize("name", sorted(_U64_OPS))
def test_uint64(name, dev):
    skip_if_narrowed(torch.uint64)
    # uint64 was refused; XLA has it under x64. Values from 2**63 on check that nothing
    # goes through int64 (lifted Python ints beyond int64 stay constants of their node).
    b = torch.tensor([3, 1, 2, 1, 7], dtype=torch.uint64)
    fn = _U64_OPS[name]
    assert_close(fn(_U64.to(dev), b.to(dev)), fn(_U64, b))


def test_uint64_round_trip_and_host_reads(dev):
    skip_if_narrowed(torch.uint64)
    d = _U64.to(dev)
    assert d.dtype == torch.uint64
    assert d.tolist() == _U64.tolist() and d[3].item() == 2**63 + 5
    assert torch.equal(torch.zeros(3, dtype=torch.uint64, device=dev).cpu(), torch.zeros(3, dtype=torch.uint64))


def test_python_int_beyond_int64_is_exact_for_other_dtypes(dev):
    # Such an int used to overflow when lifted to an int64 runtime operand.
    a = torch.randn(4)
    assert_close((a.to(dev) + 2**63) * 1.0, (a + 2**63) * 1.0)
