"""Operands that PyTorch ignores for some scalar value, against eager with NaN and inf in them.

PyTorch documents that with `beta=0` the add-matmul family (addmm, addmv, baddbmm,
addbmm, addr) ignores its input: NaN and inf there must not reach the result (issue #21).
The audit of the other ops with a scalar that zeroes an operand (add/sub/rsub `alpha`,
addcmul/addcdiv `value`, lerp `weight`, pow with exponent 0) found eager propagating
NaN where the scalar is 0, as IEEE arithmetic does, except lerp's weight 1 (eager's
formula starts from the far end); those cases are pinned here too. `alpha=0` in the
matmul family is not promised by PyTorch and eager's result depends on its BLAS path
(shape and dtype), so it is not compared.
"""
import pytest
import torch

import lazyxla as lx

NAN, INF = float("nan"), float("inf")


def _poisoned(*shape, bad=NAN, dtype=torch.float32):
    t = torch.randn(*shape, dtype=dtype)
    t.view(-1)[::2] = bad
    return t


def _compare(fn, args, **kwargs):
    dev = lx.device()
    want = fn(*args, **kwargs)
    got = fn(*[a.to(dev) if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=1e-5, atol=1e-5)
    return want


FAMILY = [
    (torch.addmm, [(3, 4), (3, 5), (5, 4)]),
    (torch.addmm, [(4,), (3, 5), (5, 4)]),          # broadcast input
    (torch.addmv, [(3,), (3, 5), (5,)]),
    (torch.baddbmm, [(2, 3, 4), (2, 3, 5), (2, 5, 4)]),
    (torch.addbmm, [(3, 4), (2, 3, 5), (2, 5, 4)]),
    (torch.addr, [(3, 4), (3,), (4,)]),
]


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("beta,alpha", [(0, 1), (0.0, 2.5), (0, -1)])
@pytest.mark.parametrize("fn,shapes", FAMILY, ids=lambda v: getattr(v, "__name__", None))
def test_beta_zero_ignores_the_input(fn, shapes, beta, alpha, bad):
    args = [_poisoned(*shapes[0], bad=bad)] + [torch.randn(*s) for s in shapes[1:]]
    want = _compare(fn, args, beta=beta, alpha=alpha)
    assert torch.isfinite(want).all()


@pytest.mark.parametrize("fn,shapes", FAMILY, ids=lambda v: getattr(v, "__name__", None))
def test_beta_zero_in_place_and_float64(fn, shapes):
    args = [_poisoned(*shapes[0], dtype=torch.float64)] + [torch.randn(*s, dtype=torch.float64)
                                                          for s in shapes[1:]]
    _compare(fn, args, beta=0)
    if len(shapes[0]) == len(shapes[1]) or fn is torch.addr:
        inplace = getattr(torch.Tensor, fn.__name__ + "_")
        _compare(lambda x, *rest, **kw: inplace(x.clone(), *rest, **kw), args, beta=0)


def test_beta_zero_integer_inputs():
    big = torch.full((2, 2), 7)
    a, b = torch.arange(4).reshape(2, 2), torch.arange(4, 8).reshape(2, 2)
    _compare(torch.addmm, [big, a, b], beta=0, alpha=3)


def test_beta_zero_with_a_lifted_beta_compiles_once(dev):
    # beta is a lifted scalar: beta=0 and beta=0.5 share one graph, and each is exact
    x, a, b = _poisoned(3, 4), torch.randn(3, 5), torch.randn(5, 4)
    xd, ad, bd = x.to(dev), a.to(dev), b.to(dev)
    compiles = []
    for beta in (0.5, 0.0):
        torch.testing.assert_close(torch.addmm(xd, ad, bd, beta=beta).cpu(), torch.addmm(x, a, b, beta=beta),
                                   equal_nan=True)
        compiles.append(lx.metrics.counter_value("UncachedCompile") or 0)
    assert compiles[1] == compiles[0]


@pytest.mark.parametrize("bad", [NAN, INF])
@pytest.mark.parametrize("case", ["add", "sub", "rsub", "addcmul", "addcdiv", "lerp0", "lerp1", "pow0"])
def test_scalar_that_zeroes_an_operand_matches_eager(case, bad):
    x, y, z = torch.randn(6), _poisoned(6, bad=bad), torch.randn(6)
    fns = {"add": lambda x, y: torch.add(x, y, alpha=0), "sub": lambda x, y: torch.sub(x, y, alpha=0),
           "rsub": lambda x, y: torch.rsub(y, x, alpha=0),
           "addcmul": lambda x, y, z: torch.addcmul(x, y, z, value=0),
           "addcdiv": lambda x, y, z: torch.addcdiv(x, y, z, value=0),
           "lerp0": lambda x, y: torch.lerp(x, y, 0.0), "lerp1": lambda x, y: torch.lerp(x, y, 1.0),
           "pow0": lambda x, y: torch.pow(y, 0)}
    fn = fns[case]
    args = [x, y, z][:fn.__code__.co_argcount]
    _compare(fn, args)


def test_lerp_matches_eager_near_both_ends():
    start, end = torch.randn(64) * 1e3, torch.randn(64)
    for w in (0.0, 0.25, 0.4999, 0.5, 0.75, 1.0):
        _compare(torch.lerp, [start, end, w])
    _compare(torch.lerp, [start, end, torch.rand(64)])
