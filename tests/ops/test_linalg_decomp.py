"""Decompositions and solves lowered to JAX (lower/linalg_decomp.py, linalg_solve.py):
values and gradients against eager CPU, and no host fallback."""
import pytest
import torch

import lazyxla as lx
from helpers import assert_no_fallback, check_op, host_fallbacks


def _spd(n, batch=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g)
    return (a @ a.mT + n * torch.eye(n)).requires_grad_()


def _general(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=g)
    if shape[-1] == shape[-2]:  # well conditioned
        a = a + 3 * torch.eye(shape[-1])
    return a.requires_grad_()


def _svd_invariants(a):
    # singular vectors are unique up to sign: compare what is unique (as OpInfo does)
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    return s, u @ torch.diag_embed(s) @ vh, (u * s.unsqueeze(-2)) @ vh


@pytest.mark.parametrize("fn,make", [
    (_svd_invariants, lambda: _general(2, 5, 3)),
    (lambda a: torch.linalg.svdvals(a), lambda: _general(4, 6)),
    (lambda a: torch.linalg.cholesky(a), lambda: _spd(4, (2,))),
    (lambda a: torch.linalg.cholesky(a, upper=True), lambda: _spd(3)),
    (lambda a: torch.linalg.inv(a), lambda: _general(2, 4, 4)),
    (lambda a: torch.linalg.det(a), lambda: _general(3, 3, 3)),
    (lambda a: torch.linalg.slogdet(a), lambda: _general(4, 4)),
    (lambda a: torch.linalg.eigvalsh(a), lambda: _spd(5)),
    (lambda a: torch.linalg.pinv(a), lambda: _general(5, 3)),
    (lambda a: torch.linalg.matrix_exp(a * 0.3), lambda: _general(4, 4)),
    (lambda a: torch.linalg.qr(a).R.abs(), lambda: _general(5, 4)),
])
def test_decomposition_forward_and_backward(fn, make):
    check_op(fn, make(), rtol=1e-4, atol=1e-4)
    assert host_fallbacks() == []


@pytest.mark.parametrize("left", [True, False])
def test_solve_forward_and_backward(left):
    a, b = _general(2, 4, 4), torch.randn(2, 4, 3).requires_grad_()
    if not left:
        b = torch.randn(2, 3, 4).requires_grad_()
    check_op(lambda a, b: torch.linalg.solve(a, b, left=left), a, b, rtol=1e-4, atol=1e-4)
    check_op(lambda a, v: torch.linalg.solve(a, v), _general(4, 4), torch.randn(4).requires_grad_(),
             rtol=1e-4, atol=1e-4)
    assert host_fallbacks() == []


def test_triangular_lu_and_cholesky_solves():
    a, b = _general(3, 3), torch.randn(3, 2)
    check_op(lambda a, b: torch.linalg.solve_triangular(a.triu(), b, upper=True), a, b, rtol=1e-4, atol=1e-4)
    check_op(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b), a, b, rtol=1e-4, atol=1e-4)
    check_op(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b.mT, left=False, adjoint=True),
             a, b, rtol=1e-4, atol=1e-4)
    check_op(lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(a)), _spd(3), b, rtol=1e-4, atol=1e-4)
    check_op(lambda a: torch.linalg.lu(a), _general(4, 3), rtol=1e-5, atol=1e-5)
    assert host_fallbacks() == []


def test_cholesky_info_names_the_failing_minor_and_errors_like_eager(dev):
    # the 3rd leading minor is not positive-definite
    a = torch.tensor([[4.0, 2, 0], [2, 5, 3], [0, 3, 1]])
    bad = torch.stack([torch.eye(3), a])
    check_op(lambda t: torch.linalg.cholesky_ex(t).info, bad)
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 3"):
        torch.linalg.cholesky(a.to(dev))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(torch.zeros(2, 2).to(dev))
    assert_no_fallback("linalg_cholesky_ex", "linalg_inv_ex", "_linalg_check_errors")


@pytest.mark.parametrize("driver", [None, "gels", "gelsd"])
def test_lstsq_shapes_follow_the_driver(driver):
    g = torch.Generator().manual_seed(0)   # the suite's order must not choose the inputs
    a, b = torch.randn(6, 3, generator=g), torch.randn(6, 2, generator=g)
    check_op(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), a, b, rtol=1e-4, atol=1e-4)
    if driver == "gels":  # eager refuses a rank-deficient A with gels (see _lstsq)
        return
    rank_deficient = a.clone()
    rank_deficient[:, 2] = rank_deficient[:, 1]
    check_op(lambda a, b: torch.linalg.lstsq(a, b, driver=driver), rank_deficient, b, rtol=1e-4, atol=1e-4)
    assert host_fallbacks() == []
    assert lx.metrics.counter_value("aten::linalg_lstsq") is None


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_geqrf_and_ormqr_like_lapack(shape, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(shape, generator=g).to(dtype)
    check_op(lambda t: torch.geqrf(t), a, rtol=1e-4, atol=1e-4)
    packed, tau = torch.geqrf(a)
    m = shape[-2]
    c = torch.randn(shape[:-2] + (m, 2), generator=g).to(dtype).requires_grad_()
    for left in (True, False):
        cc = c if left else c.mT.detach().clone().requires_grad_()
        for transpose in (False, True):
            check_op(lambda p, t, x: torch.ormqr(p, t, x, left=left, transpose=transpose), packed, tau, cc,
                     rtol=1e-4, atol=1e-4)
    assert host_fallbacks() == []
