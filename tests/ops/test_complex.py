"""Complex dtypes (complex64, complex128) on the lazyxla device, compared with eager CPU:
transfers, math-bit views (conj, neg), real/imag/view_as_real write-through, elementwise
math, reductions, promotion, Python complex scalars, autograd, donation, random draws."""
import numpy as np
import pytest
import torch

import lazyxla as lx
from helpers import as_held, assert_close, inexact_float32_math, assert_no_fallback, check_op, counter, host_fallbacks, materialised

CDTYPES = [torch.complex64, torch.complex128]
# the op-by-op grids run complex128 in the slow suite only (transfers, views, fft and
# promotion cover it by default)
GRID_CDTYPES = [torch.complex64, pytest.param(torch.complex128, marks=pytest.mark.slow)]


def crand(*shape, dtype=torch.complex64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=dtype)


def bits(t: torch.Tensor) -> tuple:
    return t.is_conj(), t.is_neg()


# -- creation and transfers ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", CDTYPES)
def test_round_trip_both_ways(dev, dtype):
    z = crand(3, 4, dtype=dtype)
    d = z.to(dev)
    assert d.dtype == dtype and d.device == dev
    held = as_held(z)   # the TPU holds complex128 as complex64
    assert torch.equal(d.cpu(), held)
    assert d.tolist() == held.tolist()
    assert d[1, 2].item() == held[1, 2].item() and isinstance(d[1, 2].item(), complex)
    host = np.asarray([1 + 2j, -3.5j, 4], dtype=np.complex64 if dtype == torch.complex64 else np.complex128)
    assert torch.equal(torch.from_numpy(host).to(dev).cpu(), torch.from_numpy(host))
    assert np.array_equal(d.cpu().numpy(), held.numpy())


def test_upload_of_a_conjugated_cpu_tensor_takes_its_values(dev):
    z = crand(5)
    d = z.conj().to(dev)          # a CPU tensor with the conjugate bit set
    assert_close(d, z.conj().resolve_conj())
    assert not d.is_conj()        # a copy, as eager's .to() of a conj tensor to another device


@pytest.mark.parametrize("dtype", CDTYPES)
def test_factories(dev, dtype):
    assert_close(torch.tensor([1 + 2j, 3j, -1], device=dev, dtype=dtype), torch.tensor([1 + 2j, 3j, -1], dtype=dtype))
    assert_close(torch.zeros(2, 3, dtype=dtype, device=dev), torch.zeros(2, 3, dtype=dtype))
    assert_close(torch.ones(4, dtype=dtype, device=dev), torch.ones(4, dtype=dtype))
    assert_close(torch.full((2, 2), 1.5 - 2j, dtype=dtype, device=dev), torch.full((2, 2), 1.5 - 2j, dtype=dtype))
    z = crand(3, dtype=dtype)
    check_op(lambda t: torch.full_like(t, 2j), z)
    check_op(lambda t: t.new_full((2,), -1 + 1j), z)
    check_op(lambda t: torch.ones_like(t) * 1j, z)
    assert_close(torch.full((3,), 2j, device=dev), torch.full((3,), 2j))   # dtype from the fill value


def test_complex_and_polar():
    re, im = torch.randn(4, 3), torch.randn(4, 3)
    check_op(torch.complex, re.requires_grad_(), im.requires_grad_())
    check_op(torch.complex, re.detach().double(), im.detach().double())
    r, theta = torch.rand(6) + 0.1, torch.randn(6)
    check_op(torch.polar, r.requires_grad_(), theta.requires_grad_())
    assert_no_fallback("complex", "polar")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int8, torch.bool])
def test_casts_from_complex(dtype):
    # (eager warns that the imaginary part is discarded, once per process)
    check_op(lambda t: t.to(dtype), torch.tensor([1j, 0, -2.5 + 0j, 3.7 - 1j, complex(0, -0.0)]))


# -- math bits: conj and neg views ----------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda z: z.conj(),
    lambda z: z.conj().conj(),
    lambda z: z.conj()[1:],
    lambda z: z.conj().t(),
    lambda z: z.conj().imag,
    lambda z: z.conj().real,
    lambda z: z.imag,
    lambda z: z.conj().detach(),
    lambda z: z.conj().resolve_conj(),
    lambda z: z.conj().imag.resolve_neg(),
    lambda z: z.conj_physical(),
    lambda z: torch._neg_view(z),
    lambda z: torch._neg_view(z.conj()),
    lambda z: torch._neg_view(z.conj()).t().t(),   # a permutation undone keeps the bits
])
def test_math_bit_views_match_eager_values_and_bits(dev, fn):
    z = crand(3, 4)
    expected = fn(z)
    actual = fn(z.to(dev))
    assert bits(actual) == bits(expected)
    assert_close(actual.cpu(), expected.resolve_conj().resolve_neg())


@pytest.mark.parametrize("fn", [
    lambda z: z.conj() * 2,
    lambda z: z.conj().exp(),
    lambda z: z.conj() @ z.t(),
    lambda z: z.conj().sum(0),
    lambda z: torch.view_as_real(z.conj().resolve_conj()),
    lambda z: z.conj().imag * 3,
    lambda z: z.conj().clone(),
    lambda z: torch.cat([z.conj(), z]),
    lambda z: z.conj().to(torch.complex128),
    lambda z: z.conj().abs(),
    lambda z: torch.vdot(z.conj()[0], z[1]),
])
def test_ops_after_conj_see_conjugated_values(fn):
    out = check_op(fn, crand(3, 3))
    assert not out.is_conj()


def test_resolve_conj_copies_where_the_view_aliases(dev):
    for target in ("cpu", dev):
        z = crand(4).to(target)
        view, copy = z.conj(), z.conj().resolve_conj()
        copy.add_(1)          # a copy: z unchanged
        view.mul_(2j)         # a view: z becomes conj(conj(z) * 2j)
        expected = crand(4).conj().mul(2j).conj()
        assert_close(z.cpu(), expected)
        assert_close(copy.cpu(), crand(4).conj().resolve_conj() + 1)


def test_view_as_real_of_a_conjugated_tensor_raises_as_eager(dev):
    with pytest.raises(RuntimeError, match="resolve_conj"):
        torch.view_as_real(crand(3).conj())
    with pytest.raises(RuntimeError, match="resolve_conj"):
        torch.view_as_real(crand(3).to(dev).conj())


def test_host_copy_of_a_conj_view_holds_resolved_values(dev):
    # Eager's .cpu() keeps the bit (and numpy() then refuses); lazyxla's copy arrives
    # resolved (torch's Conjugate fallback resolves before _to_copy): same values.
    c = crand(3).to(dev).conj().cpu()
    assert not c.is_conj()
    assert np.array_equal(c.numpy(), crand(3).conj().resolve_conj().numpy())


# -- real / imag / view_as_real / view_as_complex: views with write-through ------------------

def _writes(z):
    z.real.mul_(3)
    z.imag.add_(1)
    z.imag[0] = -7
    z.conj().imag.sub_(0.5)          # a neg view (-z.imag) of a conj view: z.imag grows by 0.5
    torch.view_as_real(z)[..., 0].clamp_(-1, 1)
    r = torch.view_as_real(z)
    r[1] = 2.5
    c = torch.view_as_complex(r)
    c[2] *= 1j
    return z, z.real, z.imag, torch.view_as_real(z), c


@pytest.mark.parametrize("dtype", CDTYPES)
def test_writes_through_real_imag_and_view_as_real(dtype):
    check_op(_writes, crand(4, 3, dtype=dtype))


def test_views_see_later_writes_to_the_base(dev):
    def fn(z):
        re, im, r = z.real, z.imag, torch.view_as_real(z)
        z.mul_(1j)
        return re * 1, im * 1, r * 1
    check_op(fn, crand(5))


def test_view_as_complex_write_through_into_a_real_base():
    def fn(x):
        c = torch.view_as_complex(x)
        c.mul_(1 + 1j)
        c[0] = 3j
        return x, c * 1
    check_op(fn, torch.randn(4, 2))


def test_as_strided_over_a_reinterpreting_view_raises_with_the_workaround(dev):
    r = torch.view_as_real(crand(4).to(dev))
    with pytest.raises(NotImplementedError, match=r"view_as_real.*clone\(\)"):
        r.as_strided((2, 2), (2, 1))
    check_op(lambda z: torch.view_as_real(z).clone().as_strided((2, 2), (2, 1)), crand(4))


def test_view_as_real_and_complex_round_trip():
    check_op(lambda z: torch.view_as_complex(torch.view_as_real(z) * 2), crand(2, 3))
    check_op(lambda x: torch.view_as_real(torch.view_as_complex(x)).sum(-1), torch.randn(3, 5, 2).requires_grad_())
    assert_no_fallback("view_as_real", "view_as_complex", "_conj", "_neg_view")


# -- elementwise -----------------------------------------------------------------------------

UNARY = ["neg", "exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan",
         "asinh", "acosh", "atanh", "reciprocal", "rsqrt", "log1p", "expm1", "square", "sigmoid", "abs",
         "angle", "sgn", "log2", "log10", "conj_physical"]


@pytest.mark.parametrize("dtype", GRID_CDTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, dtype):
    z = crand(4, 5, dtype=dtype) + (0.3 + 0.2j)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    if inexact_float32_math() and dtype == torch.complex64:
        # the TPU's float32 division and logarithm are approximations: the complex logs and
        # inverse functions (and their gradients, quotients) land up to ~1e-4 off there
        tol = dict(rtol=3e-4, atol=3e-4)
    check_op(getattr(torch, name), z.requires_grad_(), **tol)


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b, lambda a, b: a - b * 2, lambda a, b: a * b, lambda a, b: a / b,
    lambda a, b: a ** b, lambda a, b: torch.add(a, b, alpha=2 - 1j), lambda a, b: torch.where(a.real > 0, a, b),
    lambda a, b: torch.lerp(a, b, 0.3), lambda a, b: torch.addcmul(a, a, b, value=1j),
])
def test_binary(fn):
    check_op(fn, crand(4, 3).requires_grad_(), crand(3, seed=1).requires_grad_(), rtol=1e-4, atol=1e-5)


def test_pow_with_scalar_exponents():
    z = crand(6) + 0.5
    for e in (2, 3, 0.5, -1, 2.5, 1j, 1 + 1j):
        check_op(lambda t: t ** e, z.requires_grad_(), rtol=1e-4, atol=1e-5)
    check_op(lambda t: 2 ** t, z, rtol=1e-4, atol=1e-5)
    check_op(lambda t: (1 + 2j) ** t, z, rtol=1e-4, atol=1e-5)
    check_op(lambda t: t.pow_(2), z.detach().clone())


def test_comparisons_and_closeness():
    a = crand(3, 4)
    b = a.clone()
    b[0, 0] += 1e-3j
    b[1, 1] = 5
    for fn in (torch.eq, torch.ne, torch.isclose, lambda x, y: torch.isclose(x, y, atol=1e-2),
               lambda x, y: torch.tensor(torch.allclose(x, y)), lambda x, y: torch.tensor(torch.equal(x, y)),
               lambda x, y: x == 5, lambda x, y: x != (5 + 0j)):
        check_op(fn, a, b)
    check_op(lambda x: torch.isnan(x) | torch.isinf(x) | torch.isfinite(x),
             torch.tensor([complex(float("nan"), 1), complex(1, float("inf")), 2j]))


# -- reductions and products ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", GRID_CDTYPES)
@pytest.mark.parametrize("fn", [
    lambda z: z.sum(), lambda z: z.sum(1), lambda z: z.mean(0, keepdim=True), lambda z: z.prod(1),
    lambda z: torch.linalg.vector_norm(z), lambda z: torch.linalg.vector_norm(z, 1, dim=0),
    lambda z: torch.linalg.vector_norm(z, float("inf"), dim=1), lambda z: torch.linalg.vector_norm(z, 3.5),
    lambda z: torch.linalg.vector_norm(z, 0) + z.real.sum(),  # (ord 0 alone has no gradient, in eager too)
    lambda z: torch.linalg.norm(z), lambda z: torch.norm(z),
    lambda z: torch.norm(z, dim=1), lambda z: torch.vdot(z[0], z[1]), lambda z: torch.dot(z[0], z[1]),
    lambda z: z @ z.T, lambda z: z.T @ z.conj(), lambda z: z @ z[0], lambda z: torch.bmm(z[None], z.T[None]),
    lambda z: z.cumsum(0), lambda z: torch.trace(z @ z.T), lambda z: z.var(1), lambda z: z.std(),
])
def test_reductions(fn, dtype):
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    check_op(fn, crand(4, 4, dtype=dtype).requires_grad_(), **tol)


# -- promotion and Python complex scalars -------------------------------------------------------

@pytest.mark.parametrize("fn, args", [
    (lambda x, z: x + z, (torch.randn(3), crand(3))),
    (lambda x, z: x * z, (torch.randn(3).double(), crand(3))),                  # -> complex128
    (lambda x, z: x - z, (torch.arange(3), crand(3))),
    (lambda x, z: z / x, (torch.arange(1, 4), crand(3))),
    (lambda x, z: x + z, (torch.randn(3), crand((), dtype=torch.complex128))),  # 0-d keeps x's precision
    (lambda x, z: x * 1j, (torch.randn(3), crand(3))),
    (lambda x, z: x.double() * (2 - 1j), (torch.randn(3), crand(3))),
    (lambda x, z: torch.arange(3, device=x.device) + 1j, (torch.randn(3), crand(3))),
    (lambda x, z: z + True, (torch.randn(3), crand(3))),
    (lambda x, z: z * torch.tensor(2 + 3j), (torch.randn(3), crand(3))),          # 0-d host tensor
    (lambda x, z: torch.where(x > 0, z, 0), (torch.randn(3), crand(3))),
    (lambda x, z: torch.where(x > 0, z, 1j), (torch.randn(3), crand(3))),
])
def test_promotion(fn, args):
    check_op(fn, *args)


@pytest.mark.parametrize("x", [torch.tensor([0.0, 1.0]), torch.tensor([0.0, 1.0]).double(), torch.tensor([0, 1]),
                               torch.tensor([True, False])], ids=["f32", "f64", "i64", "bool"])
def test_comparing_real_tensors_with_complex_scalars(x):
    # Bug: the comparison's common dtype ignored the complex kind and cast 1j to a real 0.
    for fn in (lambda t: t == 1j, lambda t: t != 1j, lambda t: t == (1 + 0j), lambda t: t == torch.tensor(1j),
               lambda t: torch.eq(t, torch.tensor(1 + 0j, dtype=torch.complex128))):
        check_op(fn, x)


def test_python_complex_scalars_are_runtime_operands(dev):
    z = crand(8).to(dev)
    lx.sync()
    for c in (1j, 2 - 1j, -0.5 + 3j):
        lx.metrics.clear_all()
        out = (z * c).cpu()
        assert_close(out, crand(8) * c)
        if c != 1j:   # same graph for every value of the scalar: compiled once
            assert counter("UncachedCompile") == 0


# -- autograd -------------------------------------------------------------------------------------

@pytest.mark.parametrize("loss", [
    lambda z: (z.abs() ** 2).sum(),
    lambda z: (z * z.conj()).real.sum() + (z.exp() * 1j).imag.sum(),
    lambda z: torch.view_as_real(z * 2).pow(2).sum(),
    lambda z: torch.linalg.vector_norm(z),
    lambda z: (z @ z.conj()).real,
    lambda z: z.angle().sum() + z.sgn().real.sum(),
    lambda z: (z.real * z.imag).sum(),
    lambda z: torch.polar(z.abs(), z.angle()).imag.sum(),
])
def test_backward_of_a_real_loss_of_complex_leaves(dev, loss):
    z = crand(8).requires_grad_()
    d = z.detach().to(dev).requires_grad_()
    loss(z).backward()
    loss(d).backward()
    assert d.grad.dtype == torch.complex64
    assert_close(d.grad, z.grad, rtol=1e-4, atol=1e-5)


def test_backward_from_a_real_leaf_through_complex(dev):
    x = torch.randn(6).requires_grad_()
    d = x.detach().to(dev).requires_grad_()
    fn = lambda t: torch.complex(t, t * 2).mul(1 - 1j).abs().sum()  # noqa: E731
    fn(x).backward()
    fn(d).backward()
    assert_close(d.grad, x.grad, rtol=1e-4, atol=1e-5)


# -- in-place updates and donation ------------------------------------------------------------------

def test_inplace_update_at_a_sync_is_donated(dev):
    z0 = crand(1000)
    (z,) = materialised(dev, z0)
    z.mul_(1j)
    lx.sync()
    a = lx.metrics.metric_data("InputOutputAliasCount")
    assert a is not None and a[1] == 1.0          # one graph, one donated buffer
    z.add_(1 - 1j)
    lx.sync()
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 2.0   # donated again
    assert_close(z, z0 * 1j + (1 - 1j))
    assert host_fallbacks() == []


def test_complex_scalars_packed_beyond_the_separate_limit(dev):
    from lazyxla.ir.scalars import SEPARATE_SCALARS_MAX
    z = crand(4)
    d = z.to(dev)
    for i in range(SEPARATE_SCALARS_MAX + 10):
        c = complex(1, i / 1000)
        z, d = z * c + 0.5, d * c + 0.5
    assert_close(d, z, rtol=1e-4, atol=1e-4)


# -- random draws: eager's laws (the streams are JAX's) ---------------------------------------------

@pytest.mark.parametrize("dtype", CDTYPES)
def test_random_complex_draws_follow_eager_laws(dev, dtype):
    n = 20000
    r = torch.randn(n, dtype=dtype, device=dev).cpu()
    assert r.dtype == dtype
    for part in (r.real, r.imag):   # eager: each part N(0, 1/2)
        assert abs(part.mean().item()) < 0.03 and abs(part.var().item() - 0.5) < 0.03
    u = torch.rand(n, dtype=dtype, device=dev).cpu()
    for part in (u.real, u.imag):
        assert 0 <= part.min().item() and part.max().item() < 1 and abs(part.mean().item() - 0.5) < 0.02
    g = torch.empty(n, dtype=dtype, device=dev).normal_(1.0, 2.0).cpu()
    for part in (g.real, g.imag):   # eager: mean on both parts, variance std**2 / 2 each
        assert abs(part.mean().item() - 1) < 0.05 and abs(part.var().item() - 2) < 0.15


# -- host fallback with conjugated CPU tensors -----------------------------------------------------

@torch.library.custom_op("lazyxla_test::conj_scaled", mutates_args=())
def _conj_scaled(x: torch.Tensor) -> torch.Tensor:
    return x.conj() * 2          # conj view, then a kernel that relies on the Conjugate fallback


def test_host_fallback_honours_conjugate_views():
    # Bug (found by OpInfo's linalg.pinv): inside __torch_dispatch__ torch's Conjugate
    # fallback is off, so a host op that conjugated a CPU tensor read the unconjugated memory.
    z = crand(3, 2)
    out = check_op(torch.ops.lazyxla_test.conj_scaled, z)
    assert_close(out, z.conj().resolve_conj() * 2)
    assert counter("lazyxla_test::conj_scaled") == 1      # it did run on the host


@pytest.mark.slow
def test_torch_compile_of_complex_code(dev):
    z = crand(8)
    fft_abs = torch.compile(lambda t: torch.fft.fft(t * 1j).abs().sum(), backend="lazyxla")
    conj_real = torch.compile(lambda t: (t.conj() * 2).real, backend="lazyxla")
    assert_close(fft_abs(z.to(dev)), torch.fft.fft(z * 1j).abs().sum(), rtol=1e-5, atol=1e-5)
    assert_close(conj_real(z.to(dev)), (z.conj() * 2).real)


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False),
], ids=["sgd", "adam_foreach", "adamw_single"])
def test_training_complex_parameters(dev, make):
    # torch.optim steps complex parameters through view_as_real views of them and of
    # their state: in-place updates written back through the views, donated at the sync.
    w0, x = crand(5, 3), crand(4, 5, seed=1)
    results = []
    for target in ("cpu", dev):
        w = w0.clone().to(target).requires_grad_()
        opt, xs = make([w]), x.to(target)
        for _ in range(3):
            opt.zero_grad()
            (xs @ w).abs().pow(2).sum().backward()
            lx.metrics.clear_all()
            opt.step()   # ends the step on the device: an implied step barrier
            if target != "cpu":
                lx.sync()
                assert lx.metrics.metric_data("DonatedBytes")[1] >= w.numel() * w.element_size()  # w's buffer at least
        results.append(w.detach())
    assert_close(results[1], results[0], rtol=1e-5, atol=1e-5)
    assert host_fallbacks() == []
