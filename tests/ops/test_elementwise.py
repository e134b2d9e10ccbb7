import pytest
import torch

from helpers import check_op, float32_math_tolerance, skip_if_narrowed

UNARY = ["neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs",
         "erf", "log1p", "expm1", "reciprocal", "floor", "ceil", "round", "sign", "trunc", "square"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_forward_backward(name):
    x = torch.rand(5, 7) + 0.1
    check_op(getattr(torch, name), x.requires_grad_(name not in ("floor", "ceil", "round", "sign", "trunc")))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "atan2"])
def test_binary_broadcast(op):
    a = torch.rand(4, 1, 3) + 0.5
    b = torch.rand(5, 1) + 0.5
    # pow's exponent gradient is a^b log(a), summed: on a TPU, whose float32 log is up to
    # 4,000 ulps off (helpers.float32_math_tolerance), 6.4e-4 relative (the chip, 2026-12-07)
    tolerance = float32_math_tolerance(1e-5, 1e-6, floor=1e-3) if op == "pow" else {}
    check_op(getattr(torch, op), a.requires_grad_(), b.requires_grad_(), **tolerance)


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(op):
    a = torch.randint(0, 3, (4, 5)).float()
    b = torch.randint(0, 3, (5,)).float()
    check_op(getattr(torch, op), a, b)
    check_op(lambda x: getattr(torch, op)(x, 1.0), a)


def test_scalar_ops_keep_dtype():
    x = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    check_op(lambda t: t * 3 + 1, x)
    check_op(lambda t: t / 2, x)       # int / int -> float
    check_op(lambda t: t * 0.5, x)     # int * float scalar -> default float
    h = torch.rand(3, 4).half()
    check_op(lambda t: t * 2.5 + 1, h, rtol=1e-3, atol=1e-3)
    b = torch.rand(3, 4).bfloat16()
    check_op(lambda t: t + 1, b, rtol=1e-2, atol=1e-2)


def test_int64_large_values_round_trip(dev):
    skip_if_narrowed(torch.int64)
    x = torch.tensor([2**40 + 3, -(2**50)], dtype=torch.int64)
    d = x.to(dev)
    assert (d + 1).cpu().tolist() == [2**40 + 4, -(2**50) + 1]


@pytest.mark.parametrize("fn", [
    lambda x: torch.clamp(x, -0.5, 0.5),
    lambda x: torch.clamp(x, min=0.1),
    lambda x: torch.where(x > 0, x, x * 2),
    lambda x: x.masked_fill(x > 0.2, -1.0),
    lambda x: torch.nn.functional.gelu(x),
    lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    lambda x: torch.nn.functional.silu(x),
    lambda x: torch.nn.functional.leaky_relu(x, 0.1),
    lambda x: torch.nn.functional.softplus(x),
    lambda x: torch.lerp(x, torch.ones_like(x), 0.3),
    lambda x: torch.addcmul(x, x, x, value=0.5),
    lambda x: torch.addcdiv(x, x, x.abs() + 1, value=0.5),
])
def test_activation_like(fn):
    check_op(fn, torch.randn(4, 6).requires_grad_())


MORE_UNARY = {
    "tan": (-1, 1), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atan": (-3, 3), "sinh": (-2, 2),
    "cosh": (-2, 2), "asinh": (-3, 3), "acosh": (1.1, 3), "atanh": (-0.9, 0.9), "log2": (0.1, 3),
    "log10": (0.1, 3), "exp2": (-2, 2), "erfinv": (-0.9, 0.9), "lgamma": (0.5, 4), "digamma": (0.5, 4),
    "frac": (-3, 3), "sgn": (-3, 3),
}


@pytest.mark.parametrize("name", sorted(MORE_UNARY))
def test_more_unary(name):
    lo, hi = MORE_UNARY[name]
    x = torch.rand(4, 5) * (hi - lo) + lo
    check_op(getattr(torch, name), x.requires_grad_(name not in ("sgn", "frac")), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn", [
    torch.nn.functional.hardsigmoid, torch.nn.functional.hardswish, torch.nn.functional.mish,
    torch.nn.functional.elu, lambda x: torch.nn.functional.hardtanh(x, -0.5, 0.5),
    lambda x: torch.nn.functional.threshold(x, 0.1, -2.0), torch.nn.functional.relu6,
    lambda x: torch.nan_to_num(x / 0.0, posinf=9.0, neginf=-9.0), torch.isnan, torch.isinf,
    torch.isfinite, lambda x: torch.logical_not(x > 0),
])
def test_more_pointwise(fn):
    check_op(fn, torch.randn(4, 6).requires_grad_())


@pytest.mark.parametrize("op", ["fmod", "remainder", "hypot", "copysign", "fmax", "fmin", "xlogy"])
def test_more_binary(op):
    a = torch.randn(4, 5) * 3
    b = torch.rand(5) + 0.5
    if op == "xlogy":
        a = a.abs()
    grad = op not in ("fmod", "remainder")
    check_op(getattr(torch, op), a.requires_grad_(grad), b.requires_grad_(grad), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
                                "logical_xor"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_bitwise_and_logical(op, dtype):
    a, b = torch.randint(0, 4, (3, 4)).to(dtype), torch.randint(0, 4, (4,)).to(dtype)
    check_op(getattr(torch, op), a, b)
    check_op(lambda t: ~t, a)


def test_rsub_and_scalar_first_ops():
    x = torch.rand(3, 4) + 0.5
    check_op(lambda t: 2.0 - t, x.requires_grad_())
    check_op(lambda t: 2.0 ** t, x.requires_grad_())
    check_op(lambda t: 1.0 / t, x.requires_grad_())
    check_op(lambda t: t ** 3, x.requires_grad_())
    check_op(lambda t: t ** 2.5, x.requires_grad_())
    check_op(lambda t: (-t) ** 2, x.requires_grad_())
