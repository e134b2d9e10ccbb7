"""Adaptive and fractional pooling, grid sampling, antialiased upsampling, embedding
max_norm / bags, cdist, pdist and bilinear against eager CPU: values, gradients, and
no host fallback."""
import pytest
import torch
import torch.nn.functional as F

from helpers import check_op, host_fallbacks, inexact_float32_math, rand


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


@pytest.mark.parametrize("out", [(2, 3, 2), (3, 4, 4), (1, 1, 1)])
def test_adaptive_avg_pool3d_bf16(out):
    """Eager sums and divides in bfloat16 step by step: matched exactly."""
    x = _grad(2, 3, 5, 7, 6, dtype=torch.bfloat16) * 8
    check_op(lambda x: F.adaptive_avg_pool3d(x, out), x.detach(), atol=0, rtol=0)
    check_op(lambda x: F.adaptive_avg_pool3d(x, out), x.detach().requires_grad_(), atol=1e-2, rtol=1.6e-2)
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


# -- cdist, pdist --------------------------------------------------------------------------

_PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


def _rows_with_ties(*shape, seed):
    """Random rows where some coordinates and one whole row repeat (zero differences,
    zero distances: the gradients' special cases)."""
    x = rand(*shape, seed=seed)
    x[..., 1, :] = x[..., 0, :]
    x[..., 2, 0] = x[..., 3, 0]
    return x.requires_grad_()


@pytest.mark.parametrize("p", _PS)
def test_cdist(p):
    x1, x2 = _rows_with_ties(2, 5, 4, seed=1), _rows_with_ties(1, 6, 4, seed=2)
    with torch.no_grad():
        x2[0, 0] = x1[0, 0]  # a zero distance across the two sets
    for mode in ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        check_op(lambda a, b: torch.cdist(a, b, p=p, compute_mode=mode), x1, x2, atol=1e-5)
    assert host_fallbacks() == []


@pytest.mark.parametrize("p", [2.0, 1.0])
def test_cdist_many_rows_and_direct_op(p):
    """More than 25 rows: eager takes the matmul expansion for p=2; _cdist_forward called
    directly takes it too (its backward stays _cdist_backward)."""
    x1, x2 = rand(30, 3, seed=3).requires_grad_(), rand(7, 3, seed=4).requires_grad_()
    check_op(lambda a, b: torch.cdist(a, b, p=p), x1, x2, atol=1e-4)
    check_op(lambda a, b: torch.ops.aten._cdist_forward(a, b, p, None), x1, x2, atol=1e-4)
    check_op(lambda a, b: torch.ops.aten._cdist_forward(a, b, p, 1), x1, x2, atol=1e-4)
    assert host_fallbacks() == []


def test_cdist_edges():
    x1 = rand(4, 3, seed=5)
    x2 = rand(5, 3, seed=6)
    x1[0, 0], x1[1, 1], x2[2, 2] = float("nan"), float("inf"), -float("inf")
    for p in _PS:
        check_op(lambda a, b: torch.cdist(a, b, p=p, compute_mode="donot_use_mm_for_euclid_dist"), x1, x2)
    check_op(lambda a, b: torch.cdist(a, b), torch.zeros(3, 0), torch.zeros(2, 0))
    check_op(lambda a, b: torch.cdist(a, b), torch.zeros(0, 3), torch.zeros(2, 3))
    assert host_fallbacks() == []


@pytest.mark.parametrize("p", _PS)
def test_pdist(p):
    check_op(lambda x: F.pdist(x, p=p), _rows_with_ties(6, 5, seed=7), atol=1e-5)
    check_op(lambda x: F.pdist(x, p=p), rand(1, 3, seed=8).requires_grad_())
    assert host_fallbacks() == []


# -- bilinear (_trilinear) -----------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_bilinear(dtype, tol):
    x1, x2 = _grad(4, 3, dtype=dtype, seed=1), _grad(4, 5, dtype=dtype, seed=2)
    w, b = _grad(2, 3, 5, dtype=dtype, seed=3), _grad(2, dtype=dtype, seed=4)
    check_op(F.bilinear, x1, x2, w, b, atol=tol, rtol=tol)
    check_op(F.bilinear, x1[None].expand(2, 4, 3), x2[None].expand(2, 4, 5), w, None, atol=tol, rtol=tol)
    # eager rounds x1 W to the dtype before the product with x2: bf16 matched exactly
    exact = 0 if dtype == torch.bfloat16 else tol
    check_op(F.bilinear, x1.detach() * 4, x2.detach() * 4, w.detach(), None, atol=exact, rtol=exact)
    assert host_fallbacks() == []


def test_bilinear_int_and_trilinear_broadcast():
    gen = torch.Generator().manual_seed(0)
    x1, x2 = torch.randint(-5, 5, (4, 3), generator=gen), torch.randint(-5, 5, (4, 5), generator=gen)
    w = torch.randint(-5, 5, (2, 3, 5), generator=gen)
    check_op(F.bilinear, x1, x2, w, None)
    # a size-1 dim broadcasting against a larger one, and no summed dim
    check_op(lambda a, b, c: torch.ops.aten._trilinear(a, b, c, [0], [1], [2], [1]),
             rand(1, 4, seed=1), rand(3, 4, seed=2), rand(3, 1, seed=3))
    check_op(lambda a, b, c: torch.ops.aten._trilinear(a, b, c, [0], [1], [], []),
             rand(3, 4, seed=1), rand(2, 4, seed=2), rand(2, 3, 4, seed=3))
    assert host_fallbacks() == []


# -- embedding max_norm --------------------------------------------------------------------

@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_embedding_max_norm(norm_type, dtype, tol):
    """The looked-up rows over max_norm are scaled in place (repeats once), others kept;
    the weight afterwards and the gradient both match."""
    idx = torch.tensor([[0, 2, 2], [5, 0, 7]])

    def fn(w, i):  # w is check_op's own copy: renormalised in place
        out = F.embedding(i, w, max_norm=1.5, norm_type=norm_type)
        return out, w.detach().clone()
    w = rand(9, 4, seed=3, dtype=dtype) * 2
    w[7] = 0.1  # under max_norm: untouched
    check_op(fn, w.requires_grad_(), idx, atol=tol, rtol=tol)
    # the renormalised weight itself: bit for bit in bf16 (to one bf16 ulp where the scale's
    # float32 division may be an ulp off: helpers.inexact_float32_math)
    exact = (2 ** -8 if inexact_float32_math() else 0) if dtype == torch.bfloat16 else tol
    with torch.no_grad():
        check_op(fn, w.detach() * 8, idx, atol=exact, rtol=exact)
    assert host_fallbacks() == []


def test_embedding_renorm_inplace_op():
    def fn(w, i):
        w = w.clone()
        torch.embedding_renorm_(w, i, 0.5, 2.0)
        return w
    check_op(fn, rand(6, 3, seed=1), torch.tensor([4, 1, 1, 3]))
    assert host_fallbacks() == []


# -- grid_sampler_2d / grid_sampler_3d ----------------------------------------------------

def _grid(*shape, seed, dtype=torch.float32):
    """Sampling coordinates mostly in [-1, 1], some outside (padding modes), exact corners."""
    g = rand(*shape, seed=seed) * 0.8
    flat = g.view(-1)
    flat[:4] = torch.tensor([-1.0, 1.0, 1.7, -2.3])
    return g.to(dtype).requires_grad_()


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d(mode, padding, align):
    x = _grad(2, 3, 4, 5, 6, seed=1)
    grid = _grid(2, 3, 2, 4, 3, seed=2)
    check_op(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align), x, grid,
             atol=1e-5)
    assert host_fallbacks() == []


# bicubic takes 8-12 s a case (16 taps' gathers and their backward compile): slow run
@pytest.mark.parametrize("mode", ["bilinear", "nearest", pytest.param("bicubic", marks=pytest.mark.slow)])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_2d(mode, padding, align):
    x = _grad(2, 3, 5, 6, seed=1)
    grid = _grid(2, 4, 7, 2, seed=2)
    check_op(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align), x, grid,
             atol=1e-5)
    assert host_fallbacks() == []


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d_bf16_exact(mode):
    """bf16 arithmetic rounded step by step as eager's scalar kernel does: bit for bit."""
    x = rand(2, 3, 5, 6, seed=5, dtype=torch.bfloat16)
    for padding in ("zeros", "border", "reflection"):
        check_op(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=False), x,
                 _grid(2, 4, 7, 2, seed=6, dtype=torch.bfloat16).detach(), atol=0, rtol=0)
    assert host_fallbacks() == []


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d_bf16_and_input_grad_only(padding):
    x = _grad(1, 2, 3, 4, 5, seed=3, dtype=torch.bfloat16)
    grid = _grid(1, 4, 3, 2, 3, seed=4, dtype=torch.bfloat16)
    check_op(lambda x, g: F.grid_sample(x, g, padding_mode=padding, align_corners=False), x, grid,
             atol=0, rtol=0, backward=False)
    check_op(lambda x, g: F.grid_sample(x, g, padding_mode=padding, align_corners=False), _grad(1, 2, 3, 4, 5, seed=3),
             _grid(1, 4, 3, 2, 3, seed=4).detach(), atol=1e-5)
    assert host_fallbacks() == []


# -- antialiased bilinear upsampling -------------------------------------------------------

@pytest.mark.parametrize("size", [(3, 4), (9, 11), (5, 20), (1, 1), (7, 8)])
@pytest.mark.parametrize("align", [False, True])
def test_upsample_bilinear2d_aa(size, align):
    x = _grad(2, 3, 7, 8, seed=5)
    check_op(lambda x: F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=align), x,
             atol=1e-5)
    check_op(lambda x: torch.ops.aten._upsample_bilinear2d_aa(x, size, align), x, atol=1e-5)
    assert host_fallbacks() == []


def test_upsample_bilinear2d_aa_scale_factor():
    x = _grad(1, 2, 9, 10, seed=6)
    for sf in (0.3, 0.77, 1.6):
        check_op(lambda x: F.interpolate(x, scale_factor=sf, mode="bilinear", antialias=True), x, atol=1e-5)
        check_op(lambda x: F.interpolate(x, scale_factor=sf, mode="bilinear", antialias=True,
                                         recompute_scale_factor=True), x, atol=1e-5)
    assert host_fallbacks() == []


# -- embedding_bag (forward only: no autograd) ----------------------------------------------

@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_embedding_bag_forward_only(mode, dtype, tol):
    w = rand(10, 3, seed=9, dtype=dtype)
    w[4, 1] = w[6, 1]  # a tie inside a bag
    idx = torch.tensor([4, 6, 2, 2, 9, 0, 4, 1, 7])
    offsets = torch.tensor([0, 2, 2, 5, 9])  # an empty bag in the middle and one at the end
    psw = rand(9, seed=10, dtype=dtype) if mode == "sum" else None
    with torch.no_grad():
        for pad in (None, 2, 4):
            check_op(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=pad), w, idx, offsets,
                     atol=tol, rtol=tol)
            check_op(lambda w, i, o, s: F.embedding_bag(i, w, o, mode=mode, padding_idx=pad,
                                                        per_sample_weights=s), w, idx, offsets, psw, atol=tol, rtol=tol)
        check_op(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True), w, idx, offsets,
                 atol=tol, rtol=tol)
        check_op(lambda w, i: F.embedding_bag(i, w, mode=mode, max_norm=1.0), w, idx.reshape(3, 3),
                 atol=tol, rtol=tol)
        # the op itself: output, offset2bag, bag_size and (max) max_indices as eager computes them;
        # sum/mean's max_indices is empty in the meta function, bag_size-shaped on eager's CPU
        keep = 4 if mode == "max" else 3
        check_op(lambda w, i, o: torch.ops.aten._embedding_bag_forward_only(
            w, i, o, False, ("sum", "mean", "max").index(mode), False, None, False, 2)[:keep], w, idx, offsets,
            atol=tol, rtol=tol)
    assert host_fallbacks() == []


def test_empty_batches():
    """Zero-size batches (OpInfo samples have them): empty results, no errors."""
    x = torch.zeros(0, 1, 4, 5, 4)
    check_op(lambda x, u: F.fractional_max_pool3d(x, (2, 2, 1), output_size=2, return_indices=True,
                                                  _random_samples=u), x, torch.rand(0, 1, 3))
    check_op(lambda x: F.adaptive_max_pool3d(x, 2, return_indices=True), x)
    check_op(lambda x: F.adaptive_avg_pool3d(x.bfloat16(), (3, 2, 2)), x)
    check_op(F.bilinear, torch.zeros(0, 3), torch.zeros(0, 4), rand(5, 3, 4, seed=1), rand(5, seed=2))
    assert host_fallbacks() == []
