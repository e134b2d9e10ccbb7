"""Adaptive and fractional pooling, grid sampling, antialiased upsampling, embedding
max_norm / bags, cdist, pdist and bilinear against eager CPU: values, gradients, and
no host fallback."""
import pytest
import torch
import torch.nn.functional as F

from helpers import check_op, host_fallbacks, rand


def _grad(*shape, dtype=torch.float32, seed=None):
    return rand(*shape, seed=seed, dtype=dtype).requires_grad_()


def _with_edges(x):
    """x with NaN, +-inf and ties planted (a copy, same requires_grad)."""
    y = x.detach().clone()
    flat = y.view(-1)
    flat[0] = float("nan")
    flat[3] = float("inf")
    flat[5] = -float("inf")
    flat[7:10] = 2.5
    return y.requires_grad_(x.requires_grad)


# -- adaptive pooling ------------------------------------------------------------------------

@pytest.mark.parametrize("out", [(2, 3, 2), (1, 1, 1), (4, 5, 3), (3, None, 2)])
def test_adaptive_avg_pool3d(out):
    check_op(lambda x: F.adaptive_avg_pool3d(x, out), _grad(2, 3, 4, 5, 6), atol=1e-5)
    check_op(lambda x: F.adaptive_avg_pool3d(x, out), _grad(3, 5, 7, 4), atol=1e-5)
    assert host_fallbacks() == []


def test_adaptive_avg_pool3d_bf16():
    check_op(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), _grad(2, 3, 5, 5, 6, dtype=torch.bfloat16),
             atol=1e-2, rtol=1.6e-2)
    assert host_fallbacks() == []


@pytest.mark.parametrize("out", [(2, 3, 2), (1, 1, 1), (4, 5, 3), (3, 7, 6)])
def test_adaptive_max_pool3d(out):
    check_op(lambda x: F.adaptive_max_pool3d(x, out, return_indices=True), _grad(2, 3, 4, 7, 6))
    check_op(lambda x: F.adaptive_max_pool3d(x, out, return_indices=True), _with_edges(_grad(3, 5, 7, 6)),
             backward=False)
    assert host_fallbacks() == []


def test_adaptive_max_pool2d_nan_and_ties():
    check_op(lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True), _with_edges(_grad(2, 7, 5)),
             backward=False)
    assert host_fallbacks() == []


# -- fractional max pooling ------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("batched", [True, False])
def test_fractional_max_pool2d(dtype, tol, batched):
    shape = (2, 3, 11, 9) if batched else (3, 11, 9)
    samples = torch.rand(2, 3, 2, generator=torch.Generator().manual_seed(1)).to(dtype)
    x = _grad(*shape, dtype=dtype)
    for k, out in [((2, 3), (5, 4)), (3, (9, 7)), (2, (1, 1)), (1, (11, 9))]:
        check_op(lambda x, u: F.fractional_max_pool2d(x, k, output_size=out, return_indices=True,
                                                      _random_samples=u), x, samples, atol=tol)
    check_op(lambda x, u: F.fractional_max_pool2d(x, 2, output_size=(4, 4), return_indices=True,
                                                  _random_samples=u), _with_edges(x), samples, backward=False)
    assert host_fallbacks() == []


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_fractional_max_pool3d(dtype, tol):
    samples = torch.rand(2, 3, 3, generator=torch.Generator().manual_seed(2)).to(dtype)
    x = _grad(2, 3, 7, 9, 8, dtype=dtype)
    for k, out in [((2, 3, 2), (5, 4, 6)), (3, (3, 3, 3)), (2, (1, 2, 1))]:
        check_op(lambda x, u: F.fractional_max_pool3d(x, k, output_size=out, return_indices=True,
                                                      _random_samples=u), x, samples, atol=tol)
    check_op(lambda x, u: F.fractional_max_pool3d(x[0], 2, output_size=(3, 4, 4), return_indices=True,
                                                  _random_samples=u[:1]), _with_edges(x), samples, backward=False)
    assert host_fallbacks() == []
