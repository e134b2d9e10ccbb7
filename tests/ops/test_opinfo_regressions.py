"""Regressions for op bugs that PyTorch's OpInfo samples found (issue #15), each
compared with eager CPU; the inputs are the failing OpInfo samples, minimised."""
import pytest
import torch

import lazyxla as lx
from helpers import EXPECTTEST_REASON, assert_close, assert_no_fallback, check_op, inexact_float32_math

aten = torch.ops.aten


@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod])
@pytest.mark.parametrize("dim", [0, -1])
def test_cumulative_op_of_a_0d_tensor(op, dim):
    # Bug: jnp.cumsum(x, axis=0) on a 0-d array raised "axis 0 is out of bounds".
    check_op(lambda t: op(t, dim), torch.tensor(1.5).requires_grad_())
    check_op(lambda t: op(t, dim), torch.tensor(-3))


@pytest.mark.parametrize("shapes", [((5, 1), (5,)), ((5, 10, 5), (10, 5)), ((3,), (2, 3))])
def test_int_div_trunc_broadcasts(shapes):
    # Bug: lax.div does not broadcast: "arrays must have the same number of dimensions".
    a = torch.tensor([7, -7, 9, -9, 5]).repeat(50)[:torch.Size(shapes[0]).numel()].reshape(shapes[0])
    b = torch.tensor([2, 3, -4, -5, 6]).repeat(50)[:torch.Size(shapes[1]).numel()].reshape(shapes[1])
    check_op(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, b)


@pytest.mark.parametrize("size", [0, 1])
def test_unfold_of_a_0d_tensor(size):
    # Bug: the lowering produced shape (1, 1) where eager gives (size,).
    check_op(lambda t: torch.unfold_copy(t, 0, size, 1), torch.tensor(2.5))
    check_op(lambda t: t.unfold(-1, size, 2) * 1, torch.tensor(2.5).requires_grad_())


@pytest.mark.parametrize("op", [aten.native_batch_norm.default, aten._native_batch_norm_legit.default])
def test_batch_norm_eval_returns_empty_saved_stats(op):
    # Bug: eval mode returned save_mean / save_invstd of shape (C,) (the meta kernel's
    # shape) where eager returns them empty, shape (0,).
    x = torch.randn(3, 2, 4)
    w, b, rm, rv = torch.rand(2) + 0.5, torch.randn(2), torch.randn(2), torch.rand(2) + 0.5
    check_op(lambda *a: op(*a, False, -1.2, 1e-5), x, w, b, rm, rv, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", [torch.addbmm, torch.addmm])
def test_int_addmm_family_truncates_alpha_and_beta(op):
    # Bug: addbmm scaled int64 values by 0.6 / 0.2 before the cast; eager casts the
    # scalars first (to 0 here), as addmm already did.
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-9, 10, (5, 5, 5) if op is torch.addbmm else (5, 5), generator=gen)
    b = torch.randint(-9, 10, (5, 5, 10) if op is torch.addbmm else (5, 10), generator=gen)
    for bias in (torch.randint(-9, 10, (5, 10), generator=gen), torch.tensor(3)):
        check_op(lambda x, y, z: op(x, y, z, beta=0.6, alpha=0.2), bias, a, b)
        check_op(lambda x, y, z: op(x, y, z, beta=2.7, alpha=-1.5), bias, a, b)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.float64])
def test_digamma_poles(dtype):
    # Bug: digamma(0) was nan; eager gives -inf at +0 (+inf at -0), nan at negative integers.
    x = torch.tensor([0, 1, 2, -1, -3, 5, 100, -7]).to(dtype)
    check_op(torch.digamma, x, rtol=1e-5, atol=1e-5)
    if dtype.is_floating_point:
        check_op(torch.digamma, torch.tensor([-0.0, 0.0, 1e-30, -1e-30], dtype=dtype), rtol=1e-5)


def test_int_pow_with_negative_exponents():
    # Bug: jnp.power on integers returned garbage for negative exponents; eager gives
    # 1 for base 1, +-1 for base -1 by parity, 0 otherwise (0 ** -n included).
    base = torch.tensor([[5], [-5], [0], [1], [-1], [2]])
    exp = torch.tensor([-1, -2, -3, 0, 3, 7])
    check_op(lambda b, e: e.__rpow__(b), exp, base)
    check_op(torch.pow, base, exp)
    check_op(lambda e: 2 ** e, exp)
    check_op(lambda e: (-1) ** e, exp)
    check_op(lambda e: 2.5 ** e, exp, rtol=1e-5)
    check_op(torch.pow, base.to(torch.int8), exp.to(torch.int8))
    check_op(torch.pow, base.abs().to(torch.uint8), exp.abs().to(torch.uint8))
    assert_no_fallback("pow")


@pytest.mark.parametrize("fn", [lambda t: t ** -1, lambda t: torch.pow(t, -2), lambda t: t.pow_(-1)])
def test_int_tensor_to_a_negative_int_scalar_raises_like_eager(fn, dev):
    # Bug: eager raises; the meta kernel does not, and the lowering returned garbage.
    for t in (torch.tensor([2, 3]), torch.tensor([2, 3]).to(dev)):
        with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
            fn(t)


def _same(fn, base):
    expected = fn(base.clone())
    actual = fn(base.clone().to(lx.device()))
    for e, a in zip(expected, actual):
        assert_close(a, e, rtol=0, atol=0)


@pytest.mark.parametrize("shapes", [((5, 5, 5), (25, 5)), ((), (1, 1, 1)), ((2, 3), (6,))])
def test_resize_to_another_shape_of_the_same_size(shapes):
    # Bug: any resize_ to another shape was refused (the OpInfo resize_ samples).
    _same(lambda t: (t.resize_(shapes[1]),), torch.randn(shapes[0]))


def test_resize_shrink_then_grow_keeps_the_storage_like_eager():
    # Shrinking keeps the storage: growing back within it finds the old values, and
    # views taken before still alias it (a write after the resizes reaches them).
    def steps(t):
        v = t[2:4]
        t.resize_(3)
        a = t.clone()
        t.resize_(2, 5)
        b = t.clone()
        t.mul_(2)
        return a, b, v, t
    _same(steps, torch.arange(10.0))


def test_resize_of_a_view_and_of_an_empty_tensor():
    def of_view(view):
        def run(t):
            u = view(t)
            u.resize_(2, 3)  # contiguous at u's storage offset, within the storage
            u.add_(1)
            return u, t
        return run
    for view in (lambda t: t.as_strided((4,), (1,), 2), lambda t: t[2:6], lambda t: t.view(2, 5)[:, 1]):
        _same(of_view(view), torch.arange(10.0))
    # An empty storage can grow: no view sees any of its elements. (Eager leaves the new
    # elements uninitialised; fill them before comparing.)
    _same(lambda t: (t.resize_(2, 3).fill_(4),), torch.empty(0))


@pytest.mark.parametrize("case", ["non-contiguous base", "grow"])
def test_resize_that_cannot_be_exact_raises(case, dev):
    # eager grows a non-empty storage in place under its views; a transposed base's
    # storage order is not its row-major value's
    t = torch.arange(10.0).reshape(2, 5).to(dev)
    with pytest.raises(NotImplementedError, match="resize_"):
        {"non-contiguous base": lambda: t.t().clone().resize_(3), "grow": lambda: t.resize_(20)}[case]()


@pytest.mark.parametrize("fn", [
    lambda t: torch.softmax(t, 0), lambda t: torch.log_softmax(t, -1),
    lambda t: torch.topk(t, 1), lambda t: t.transpose(0, -1) * 1,
])
def test_dim_ops_of_a_0d_tensor(fn):
    # Bug: softmax / log_softmax (and their backward), topk and transpose of a 0-d
    # tensor raised "axis 0 is out of bounds"; eager treats it as one element.
    check_op(fn, torch.tensor(0.7).requires_grad_())


def test_gather_with_an_empty_index_of_higher_rank():
    # Bug: eager allows an empty index of any rank; take_along_axis refused the rank.
    check_op(lambda x, i: torch.gather(x, 0, i), torch.randn(5), torch.zeros(2, 0, dtype=torch.int64))


def test_conv3d_with_one_padding_value_for_all_dims():
    # Bug: padding="valid" reaches aten.convolution as [0]: "expected 3 pads, got 1".
    check_op(lambda x, w: torch.nn.functional.conv3d(x, w, padding="valid"),
             torch.randn(1, 1, 2, 3, 10).requires_grad_(), torch.randn(2, 1, 1, 2, 4).requires_grad_(),
             rtol=1e-4, atol=1e-4)


def test_fork_rng_and_freeze_rng_state_on_the_lazyxla_device(dev):
    # Bug: torch's freeze_rng_state (every random OpInfo entry) and fork_rng asked the
    # device module for get_rng_state, which it lacked; the state is the CPU generator's.
    pytest.importorskip("expecttest", reason=EXPECTTEST_REASON)
    from torch.testing._internal.common_utils import freeze_rng_state
    torch.manual_seed(3)
    with freeze_rng_state():
        first = torch.rand(4, device=dev).cpu()
    with torch.random.fork_rng(device_type="lazyxla"):
        torch.rand(4, device=dev).cpu()
    assert_close(torch.rand(4, device=dev).cpu(), first, rtol=0, atol=0)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma_for_negative_arguments(n):
    # jax's polygamma (a Hurwitz zeta) is wrong below about -5; eager's trigamma has
    # float32 rounding near the poles that the lowering reproduces.
    x = torch.tensor([-8.4784, -7.9506, -8.0676, -3.0337, -3.9730, -0.5, 0.3, 2.5, 7.0, -2.0, 0.0])
    check_op(lambda t: torch.polygamma(n, t), x, rtol=1e-5, atol=1e-3)
    assert_no_fallback("polygamma")


def test_take_angle_and_equal_stay_on_the_device():
    x = torch.randn(3, 4)
    check_op(lambda t, i: torch.take(t, i), x, torch.tensor([[0, -1], [5, 11]]))
    check_op(torch.angle, torch.tensor([-1.0, 0.0, 2.0, float("nan")]))
    check_op(lambda a, b: torch.tensor([torch.equal(a, b), torch.equal(a, a), torch.allclose(a, b + 1e-9)]),
             x, x + 1)
    assert_no_fallback("take", "angle", "equal", "allclose")


@pytest.mark.parametrize("fn", [torch.triu_indices, torch.tril_indices])
@pytest.mark.parametrize("args", [(3, 4, 1), (4, 3, -1), (0, 2, 0), (5, 5, 0)])
def test_triangle_indices_on_the_device(fn, args, dev):
    # Bug: "Could not run 'aten::triu_indices' with arguments from the 'lazyxla' backend".
    assert_close(fn(*args, device=dev), fn(*args), rtol=0, atol=0)
    assert_close(fn(*args, dtype=torch.int32, device=dev), fn(*args, dtype=torch.int32), rtol=0, atol=0)
    assert_no_fallback("triu_indices", "tril_indices")


def test_complex_broadcasts_its_parts():
    # Bug: lax.complex does not broadcast: "arrays must have the same number of dimensions".
    check_op(torch.complex, torch.randn(3, 1, 4), torch.randn(5, 1))
    check_op(torch.complex, torch.randn(4), torch.tensor(2.0))
    assert_no_fallback()


def test_complex_logcumsumexp_keeps_eager_angle_branch():
    # Bug: jax's cumlogsumexp wrapped the imaginary part into (-pi, pi]; eager keeps the
    # imaginary part of the larger-real-part operand as it is (here up to 2*pi).
    g = torch.Generator().manual_seed(0)
    x = torch.complex(torch.randn(6, 5, generator=g) * 5, torch.rand(6, 5, generator=g) * 6.28)
    x[2, 1] = complex(float("-inf"), 0)
    x[3, 2] = complex(float("nan"), 1)
    x[:, 4] = complex(float("inf"), 1)
    for dim in (0, 1):   # rtol: exp and log are a few ulp off eager's on the TPU
        check_op(lambda t: torch.logcumsumexp(t, dim), x, rtol=1e-4)
    assert_no_fallback()


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_complex_lstsq_gives_real_residuals_and_singular_values(driver):
    # Bug: the empty residuals / singular values of a complex A came back complex.
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 3, dtype=torch.complex64, generator=g)
    b = torch.randn(4, 2, dtype=torch.complex64, generator=g)
    check_op(lambda x, y: torch.linalg.lstsq(x, y, driver=driver), a, b, atol=1e-4)


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rounding_division_is_exact_at_integers(mode, dtype):
    if inexact_float32_math():   # the quotient 9.999999 of 1.0 / 0.1 can come out as 10.0 there
        pytest.skip(f"floor/trunc of a quotient at an exact integer: {inexact_float32_math()}")
    # Bug: XLA turns x / broadcast(y) into x * (1 / y): 5.125 / 5.125 gave 0.99999994 and
    # trunc 0; and floor(1.0 / 0.1) gave 10 where eager's Python-style floor division gives 9.
    x = torch.tensor([1.0, -1.0, 5.125, 7.0, -0.0, 3.0, 1.0, 0.0, 2.0, 8.375], dtype=dtype)
    y = torch.tensor([0.1, 0.1, 5.125, -2.0, 3.0, 0.0, -0.0, -1.0, -5.0, 0.55859375], dtype=dtype)
    dev = lx.device()
    for fn in (lambda a, b: torch.div(a, b, rounding_mode=mode),
               lambda a, b: torch.div(a[:, None], b[2:3], rounding_mode=mode)):
        # bfloat16: eager's vectorised trunc rounds the quotient to bf16 first (15 for
        # 8.375 / 0.5586 = 14.99), its scalar loop does not (14); the float32 result is exact
        expected = fn(x.float(), y.float()).to(dtype) if dtype == torch.bfloat16 else fn(x, y)
        actual = fn(x.to(dev), y.to(dev)).cpu()
        torch.testing.assert_close(actual, expected, atol=0, rtol=0)
        assert torch.equal(actual.signbit(), expected.signbit())  # -0.0 as eager's
    assert_no_fallback()
