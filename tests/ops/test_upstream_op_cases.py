"""Ops that PyTorch/XLA's test_operations.py found wrong in lazyxla, each against eager CPU."""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lazyxla as lx
from helpers import assert_close


# -- EmbeddingBag backward: the dense gradient, also for sparse=True ----------------------

@pytest.mark.parametrize("sparse,mode", [(s, m) for s, m in itertools.product((False, True), ("sum", "mean", "max"))
                                         if not (s and m == "max")])
def test_embedding_bag_backward_is_eagers_gradient_in_dense_form(dev, sparse, mode):
    # sparse=True went to the host's sparse backward, whose sparse CPU gradient aborted the process
    torch.manual_seed(0)
    indices, offsets = torch.randint(0, 10, (5,)), torch.tensor([0, 3])
    weight = torch.randn(10, 5, requires_grad=True)
    F.embedding_bag(indices, weight, offsets, mode=mode, sparse=sparse).sum().backward()
    expected = weight.grad.to_dense() if sparse else weight.grad
    w = weight.detach().to(dev).requires_grad_()
    out = F.embedding_bag(indices.to(dev), w, offsets.to(dev), mode=mode, sparse=sparse)
    out.sum().backward()
    assert not w.grad.is_sparse
    assert_close(w.grad.cpu(), expected)


# -- scatter and index sums on bool: eager's logical or (a product: and) --------------------

BOOL_CASES = {
    "scatter_add_": lambda b, i, a: b.clone().scatter_add_(0, i, a),
    "scatter_reduce_sum": lambda b, i, a: b.clone().scatter_reduce(0, i, a, "sum"),
    "scatter_reduce_prod": lambda b, i, a: (~b).scatter_reduce(0, i, a, "prod"),
    "index_add": lambda b, i, a: b.clone().index_add(0, i[0, :2], a),
    "index_put_accumulate": lambda b, i, a: b.clone().index_put((i[0],), a[0], accumulate=True),
}


@pytest.mark.parametrize("name", BOOL_CASES)
def test_bool_scatter_and_index_sums_match_eager(dev, name):
    a = torch.tensor([[True] * 5, [True, False, True, False, True]])
    b = torch.tensor([[False, True, False, False, False]] * 3)
    index = torch.tensor([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]])
    fn = BOOL_CASES[name]
    assert torch.equal(fn(b.to(dev), index.to(dev), a.to(dev)).cpu(), fn(b, index, a))


# -- eager's argument errors at the op ----------------------------------------------------

def _error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.value


@pytest.mark.parametrize("fn", [lambda x: torch.max(x, dim=1), lambda x: torch.min(x, dim=1),
                                lambda x: torch.max(x), lambda x: torch.min(x)])
def test_max_min_over_an_empty_dim_raise_eagers_error(dev, fn):
    x = torch.rand(2, 0, 4)
    eager = _error(lambda: fn(x))
    lazy = _error(lambda: fn(x.to(dev)))   # used to record a node that failed at the sync
    assert isinstance(lazy, type(eager)) and str(lazy) == str(eager)
    assert isinstance(lazy, RuntimeError)   # as PyTorch/XLA raises it (lx.errors.IndexRangeError)


def test_dimension_out_of_range_is_eagers_index_error_and_a_runtime_error(dev):
    x = torch.arange(8).view(2, 2, 2)
    for dims in ((3,), (0, 1, 2, 3)):
        eager = _error(lambda: x.flip(*dims))
        lazy = _error(lambda: x.to(dev).flip(*dims))
        assert type(eager) is IndexError and str(lazy) == str(eager)
        assert isinstance(lazy, IndexError) and isinstance(lazy, RuntimeError)
    assert isinstance(_error(lambda: x.to(dev).flip(0, 1, 1)), RuntimeError)


@pytest.mark.parametrize("bounds", [(-5, float("nan")), (float("nan"), 5), (0, float("inf"))])
def test_arange_of_non_finite_bounds_raises_eagers_error(dev, bounds):
    eager = _error(lambda: torch.arange(*bounds))
    lazy = _error(lambda: torch.arange(*bounds, device=dev))
    assert type(lazy) is type(eager) and str(lazy) == str(eager)


def test_nll_loss_target_dtypes_as_eager(dev):
    x = torch.randn(4, 3).log_softmax(-1)
    for target in (torch.tensor([0, 2, 1, 1]), torch.tensor([0, 2, 1, 1], dtype=torch.uint8)):
        xc, xd = x.clone().requires_grad_(), x.to(dev).requires_grad_()
        expected = F.nll_loss(xc, target, weight=torch.tensor([0.5, 1.0, 2.0]))
        got = F.nll_loss(xd, target.to(dev), weight=torch.tensor([0.5, 1.0, 2.0], device=dev))
        expected.backward()
        got.backward()
        assert_close(got.cpu(), expected.detach())
        assert_close(xd.grad.cpu(), xc.grad)
    floating = torch.tensor([0.0, 2.0, 1.0, 1.0])
    eager = _error(lambda: F.nll_loss(x, floating))
    lazy = _error(lambda: F.nll_loss(x.to(dev), floating.to(dev)))   # torch's meta kernel: a gather error
    assert type(lazy) is type(eager) and str(lazy) == str(eager)


# -- sign and sgn of special values -----------------------------------------------------------

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_sign_and_sgn_of_nan_are_zero_as_eager(dev, dtype):
    # eager's definition, (0 < x) - (x < 0) in both its vector loop and scalar tail: 0 at nan
    x = torch.tensor([NAN, -0.0, 0.0, 2.0, -INF, INF, -3.0], dtype=dtype)
    expected = torch.tensor([0.0, 0.0, 0.0, 1.0, -1.0, 1.0, -1.0], dtype=dtype)
    for fn in (torch.sign, torch.sgn):
        assert torch.equal(fn(x.to(dev)).cpu(), expected)


def _reference_sgn(values: list, dtype: torch.dtype) -> torch.Tensor:
    """torch's own OpInfo reference for sgn (torch.testing's `reference_sgn`): x / |x| in
    NumPy's complex division, 0 at 0. It does not depend on the host, unlike eager's kernels,
    whose result for an infinite part depends on the element's position (its vector loop or
    its scalar tail: `inf+0j` gives (nan, 0) or (nan, nan) on one AVX2 machine)."""
    x = np.array(values, dtype=np.complex64 if dtype == torch.complex64 else np.complex128)
    with np.errstate(all="ignore"):
        out = x / np.abs(x)
    out[x == 0] = 0
    return torch.view_as_real(torch.from_numpy(out))


def test_sgn_of_complex_infinities_and_nans(dev):
    # PyTorch/XLA's test_sgn: complex64 with inf, nan, 0 and signed infinite real parts
    values = [complex(INF, INF), complex(NAN, NAN), 0j, complex(INF, 0), complex(-INF, 0), complex(0, INF),
              complex(NAN, 1), complex(3, 4), complex(-1e30, 1e30), complex(1e-3, -2)]
    x = torch.tensor(values, dtype=torch.complex64)
    assert_close(torch.view_as_real(x.to(dev).sgn().cpu()), _reference_sgn(values, torch.complex64))
    # complex128: finite values only; with an infinite part lazyxla keeps eager's scalar
    # kernel's (nan, 0) (lower/elementwise.py `sgn`), where the reference has (nan, nan)
    finite = [0j] + values[7:]
    wide = torch.tensor(finite, dtype=torch.complex128)
    assert_close(torch.view_as_real(wide.to(dev).sgn().cpu()), _reference_sgn(finite, torch.complex128))


# -- a backward op with a masked output, read on the host ------------------------------------

def test_conv_backward_read_through_host_replay(dev, host_replay):
    # convolution_backward's unused grad-input output has no shape: the host replay's
    # size count failed on it ("'NoneType' object is not iterable")
    conv = torch.nn.Conv2d(1, 1, kernel_size=1)
    lazy = torch.nn.Conv2d(1, 1, kernel_size=1).to(dev)
    lazy.load_state_dict(conv.state_dict())
    x = torch.tensor([[[[2077.0]]]])
    conv(x).sum().backward()
    lazy(x.to(dev)).sum().backward()
    assert_close(lazy.weight.grad.cpu(), conv.weight.grad)
    assert_close(lazy.bias.grad.cpu(), conv.bias.grad)


# -- CPU operands of any shape (lx.set_host_operands) ---------------------------------------

@pytest.fixture
def host_operands():
    lx.set_host_operands(True)
    yield
    lx.set_host_operands(False)


def test_cpu_operands_are_refused_by_default_as_in_torch(dev):
    assert not lx.host_operands_enabled()
    with pytest.raises(RuntimeError, match=r"cpu tensor of shape \[5\].*lx.set_host_operands"):
        torch.rand(5, device=dev) + torch.rand(5)


def test_host_operands_upload_cpu_tensors_of_any_shape(dev, host_operands):
    x, y = torch.rand(5), torch.rand(2, 5)
    xd = x.to(dev)
    assert_close((xd + y).cpu(), x + y)
    assert_close((y * xd).cpu(), y * x)                       # the CPU tensor first
    assert_close(torch.cat([xd, x]).cpu(), torch.cat([x, x]))   # in a list
    z = xd.clone()
    z.add_(x)                                                 # an in-place op on the device tensor
    assert_close(z.cpu(), x + x)
    with pytest.raises(RuntimeError, match="would write into a cpu tensor"):
        x.clone().add_(xd)                                    # a CPU target stays refused


def test_ir_nodes_report_compile_time_scalar_arguments(dev):
    t = torch.pow(torch.tensor([2.0, 3.0], device=dev), 5)
    pow_node = lx.debug.ir_nodes([t])[-1]
    assert pow_node.op == "aten::pow.Tensor_Scalar" and pow_node.constants == (("exponent", 5),)
