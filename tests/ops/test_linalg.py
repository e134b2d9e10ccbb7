"""Matrix products and convolutions against eager CPU (forward and backward)."""
import pytest
import torch

from helpers import check_op, randn_grad


@pytest.mark.parametrize("fn,shapes", [
    (torch.mm, [(3, 4), (4, 5)]),
    (torch.bmm, [(2, 3, 4), (2, 4, 5)]),
    (torch.matmul, [(2, 3, 4), (4,)]),
    (torch.matmul, [(4,), (4, 5)]),
    (torch.matmul, [(2, 1, 3, 4), (5, 4, 2)]),
    (torch.mv, [(3, 4), (4,)]),
    (torch.dot, [(4,), (4,)]),
    (lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0), [(5,), (3, 4), (4, 5)]),
    (lambda b, x, y: torch.baddbmm(b, x, y, beta=0.5, alpha=2.0), [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    (lambda b, x, y: torch.addbmm(b, x, y), [(3, 5), (2, 3, 4), (2, 4, 5)]),
    (lambda b, x, y: torch.addmv(b, x, y), [(3,), (3, 4), (4,)]),
    (lambda x, w, b: torch.nn.functional.linear(x, w, b), [(2, 3, 4), (5, 4), (5,)]),
])
def test_products(fn, shapes):
    check_op(fn, *[randn_grad(*s) for s in shapes], rtol=1e-5, atol=1e-5)


def test_low_precision_matmul():
    for dtype, tol in ((torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        check_op(torch.mm, torch.randn(8, 16).to(dtype), torch.randn(16, 4).to(dtype), rtol=tol, atol=tol)


@pytest.mark.parametrize("kwargs", [
    dict(stride=1, padding=0),
    dict(stride=2, padding=1),
    dict(stride=1, padding=2, dilation=2),
    dict(stride=1, padding=1, groups=2),
])
def test_conv2d(kwargs):
    x, w, b = randn_grad(2, 4, 9, 9), randn_grad(6, 4 // kwargs.get("groups", 1), 3, 3), randn_grad(6)
    check_op(lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kwargs), x, w, b, rtol=1e-4, atol=1e-4)


def test_conv1d_and_transpose():
    check_op(lambda x, w: torch.nn.functional.conv1d(x, w, padding=1), randn_grad(2, 3, 10), randn_grad(5, 3, 3),
             rtol=1e-4, atol=1e-4)
    check_op(lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
             randn_grad(1, 4, 5, 5), randn_grad(4, 3, 3, 3), rtol=1e-4, atol=1e-4)
