"""Reductions, softmax family, cumulative ops and sorting against eager CPU."""
import pytest
import torch

from helpers import check_op, randn_grad


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(),
    lambda x: x.sum(dim=1),
    lambda x: x.sum(dim=(0, 2), keepdim=True),
    lambda x: x.mean(),
    lambda x: x.mean(dim=-1),
    lambda x: x.prod(dim=1),
    lambda x: x.amax(dim=1),
    lambda x: x.amin(dim=(0, 1)),
    lambda x: x.max(),
    lambda x: x.min(),
    lambda x: x.var(dim=1),
    lambda x: x.var(dim=1, unbiased=False),
    lambda x: x.std(),
    lambda x: torch.var_mean(x, dim=2, correction=0),
    lambda x: torch.std_mean(x, dim=0),
    lambda x: x.logsumexp(dim=2),
    lambda x: x.norm(),
    lambda x: torch.linalg.vector_norm(x, ord=1, dim=1),
    lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=2),
    lambda x: torch.linalg.vector_norm(x, ord=3, dim=0),
    lambda x: torch.softmax(x, dim=1),
    lambda x: torch.log_softmax(x, dim=-1),
    lambda x: torch.cumsum(x, dim=1),
    lambda x: torch.cumprod(x, dim=2),
], ids=lambda f: None)
def test_float_reductions_forward_backward(fn):
    check_op(fn, randn_grad(3, 4, 5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda x: x.max(dim=1),
    lambda x: x.min(dim=0, keepdim=True),
    lambda x: x.argmax(),
    lambda x: x.argmax(dim=1),
    lambda x: x.argmin(dim=-1, keepdim=True),
    lambda x: torch.sort(x, dim=1),
    lambda x: torch.sort(x, dim=0, descending=True),
    lambda x: torch.sort(x, stable=True, dim=-1),
    lambda x: torch.topk(x, 2, dim=1),
    lambda x: torch.topk(x, 3, dim=0, largest=False),
])
def test_index_returning_reductions(fn):
    x = torch.randperm(60).reshape(3, 4, 5).float()  # distinct values: indices are unique
    check_op(fn, x.requires_grad_())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_and_bool_reductions(dtype):
    x = torch.randint(0, 3, (4, 6)).to(dtype)
    check_op(lambda t: t.sum(), x)
    check_op(lambda t: t.sum(dim=0), x)
    check_op(lambda t: t.any(dim=1), x)
    check_op(lambda t: t.all(), x)
    if dtype != torch.bool:
        check_op(lambda t: t.prod(dim=1), x)
        check_op(lambda t: torch.cumsum(t, 0), x)
        check_op(lambda t: t.amax(dim=0), x)


def test_low_precision_softmax_and_sum():
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(4, 8).to(dtype)
        check_op(lambda t: torch.softmax(t, dim=-1), x, rtol=1e-2, atol=1e-2)
        check_op(lambda t: t.sum(dim=1), x, rtol=1e-2, atol=1e-2)
        check_op(lambda t: t.mean(), x, rtol=1e-2, atol=1e-2)
