"""Segment reductions, put, nonzero_static, hash_tensor, random multinomial/rrelu and
the other ops of issue #15's "misc" family (lower/segments.py, indexing.py,
selection.py, reductions.py, random.py): values and gradients against eager CPU, and no
host fallback."""
import pytest
import torch

import lazyxla as lx
from helpers import check_op, host_fallbacks, inexact_float32_math, skip_if_narrowed

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce_lengths_and_offsets_with_grad(reduce, initial):
    g = torch.Generator().manual_seed(0)
    data = torch.randn(7, 3, generator=g)
    data[1, 0], data[4, 1], data[5, 2] = 0.0, NAN, data[6, 2]  # zero, NaN, a tie
    data = data.requires_grad_()
    lengths = torch.tensor([2, 0, 4, 1])
    check_op(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=initial), data, lengths, atol=1e-5)
    offsets = torch.tensor([1, 3, 3, 6])  # not starting at 0, ending before the last row
    check_op(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=initial, unsafe=True), data, offsets,
             atol=1e-5)
    assert host_fallbacks() == []


@pytest.mark.parametrize("reduce", ["sum", "max", "mean"])
def test_segment_reduce_inner_axis_bfloat16(reduce):
    g = torch.Generator().manual_seed(1)
    data = (torch.randn(2, 6, 3, generator=g) * 50).bfloat16()
    lengths = torch.tensor([[1, 5, 0], [3, 3, 0]])
    check_op(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, axis=1), data, lengths, atol=0, rtol=0)
    assert host_fallbacks() == []


def test_segment_reduce_max_ties_split_positive_gradients_like_eager():
    data = torch.tensor([1.0, 3.0, 3.0, 3.0, -1.0]).requires_grad_()
    lengths = torch.tensor([4, 1])
    check_op(lambda d, n, w: torch.segment_reduce(d, "max", lengths=n) * w, data, lengths, torch.tensor([2.0, -1.0]))
    check_op(lambda d, n: -torch.segment_reduce(d, "max", lengths=n), data, lengths)
    assert host_fallbacks() == []


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_flat_negative_indices(accumulate):
    x = torch.randn(3, 4)
    index = torch.tensor([[0, -1], [5, -12]]) if not accumulate else torch.tensor([0, -1, 0, 5, 5])
    src = torch.randn(index.shape)
    check_op(lambda x, i, s: torch.put(x, i, s, accumulate=accumulate), x, index, src)
    check_op(lambda x, i, s: x.clone().put_(i, s, accumulate=accumulate), x.to(torch.int64), index,
             src.to(torch.int64))
    assert host_fallbacks() == []


@pytest.mark.parametrize("size,fill", [(0, -1), (2, -1), (6, 7)])
def test_nonzero_static_pads_with_the_fill_value(size, fill):
    x = torch.tensor([[0.0, NAN, 0.0], [-0.0, 2.0, INF]])
    check_op(lambda t: torch.nonzero_static(t, size=size, fill_value=fill), x)
    check_op(lambda t: torch.nonzero_static(t, size=size, fill_value=fill), torch.zeros(2, 0, 3))
    check_op(lambda t: torch.nonzero_static(t, size=size), torch.tensor(3.0))
    assert host_fallbacks() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8, torch.uint8, torch.bool])
def test_hash_tensor_xors_64_bit_patterns(dtype):
    skip_if_narrowed(torch.uint64)   # the hash is 64 bits
    x = torch.tensor([[1.5, -2.0, 0.0, -0.0], [INF, -INF, 1e30, 7.0]])
    if not dtype.is_floating_point:
        x = torch.tensor([[1, -2, 0, 127], [-128, 5, 3, 3]]).to(dtype)
    check_op(lambda t: torch.hash_tensor(t), x.to(dtype))
    check_op(lambda t: torch.hash_tensor(t, 1, keepdim=True), x.to(dtype))
    check_op(lambda t: torch.hash_tensor(t, (0, 1)), x.to(dtype))
    assert host_fallbacks() == []


def test_multinomial_without_replacement_never_repeats_nor_draws_zero_weights(dev):
    torch.manual_seed(0)
    w = torch.tensor([[0.0, 1.0, 2.0, 0.0, 4.0, 1.0], [5.0, 0.0, 0.0, 1.0, 1.0, 1.0]])
    out = torch.multinomial(w.to(dev), 4, replacement=False).cpu()
    assert out.dtype == torch.int64 and out.shape == (2, 4)
    for row, weights in zip(out, w):
        assert len(set(row.tolist())) == 4
        assert all(weights[i] > 0 for i in row.tolist())
    assert host_fallbacks() == []


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_frequencies_follow_the_weights(dev, replacement):
    torch.manual_seed(1)
    w = torch.tensor([1.0, 0.0, 3.0, 6.0])
    n = 4000
    # one draw per row, many rows: the first draw's law is the weights' for both modes
    draws = torch.multinomial(w.expand(n, 4).to(dev), 1, replacement=replacement).cpu().flatten()
    freq = torch.bincount(draws, minlength=4).float() / n
    assert freq[1] == 0
    torch.testing.assert_close(freq, w / w.sum(), atol=0.03, rtol=0)
    if replacement:  # many draws from one row, repeats allowed
        draws = torch.multinomial(w.to(dev), n, replacement=True).cpu()
        freq = torch.bincount(draws, minlength=4).float() / n
        torch.testing.assert_close(freq, w / w.sum(), atol=0.03, rtol=0)
    assert host_fallbacks() == []


def test_multinomial_reproducible_under_manual_seed(dev):
    w = torch.rand(3, 10).to(dev)
    torch.manual_seed(5)
    a = torch.multinomial(w, 5).cpu()
    torch.manual_seed(5)
    assert torch.equal(a, torch.multinomial(w, 5).cpu())


def test_rrelu_training_draws_slopes_into_noise_and_its_gradient_is_the_noise(dev):
    torch.manual_seed(0)
    lower, upper = 0.1, 0.3
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0, -1.0, NAN, -INF]).to(dev).requires_grad_()
    noise = torch.zeros(8).to(dev)
    out = torch.ops.aten.rrelu_with_noise(x, noise, lower, upper, True)
    out.sum().backward()
    xc, oc, nc = x.detach().cpu(), out.detach().cpu(), noise.cpu()
    neg = xc <= 0
    assert ((nc[neg] >= lower) & (nc[neg] <= upper)).all() and (nc[~neg] == 1).all()
    torch.testing.assert_close(oc, xc * nc, equal_nan=True)
    torch.testing.assert_close(x.grad.cpu(), nc)
    assert host_fallbacks() == []


def test_rrelu_eval_is_leaky_relu_with_the_mean_slope():
    x = torch.tensor([-2.0, -0.0, 0.5, NAN, -INF]).requires_grad_()
    check_op(lambda t: torch.nn.functional.rrelu(t, 0.1, 0.3, training=False), x)
    check_op(lambda t: torch.nn.functional.rrelu(t.clone(), 0.1, 0.3, training=False, inplace=True), x)
    assert host_fallbacks() == []


def test_rrelu_inplace_training(dev):
    torch.manual_seed(0)
    x = torch.tensor([-2.0, 1.0, -1.0]).to(dev)
    torch.nn.functional.rrelu(x, 0.2, 0.25, training=True, inplace=True)
    xc = x.cpu()
    assert xc[1] == 1 and -0.5 <= xc[0] <= -0.4 and -0.25 <= xc[2] <= -0.2
    assert host_fallbacks() == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.complex64])
@pytest.mark.parametrize("start,end,steps", [(50, 1, 50), (-3, 7, 50), (3, -7, 13), (2, 9, 1), (0, 1, 0)])
def test_linspace_with_tensor_ends_like_eager_cpu(dtype, start, end, steps):
    # integers (truncated doubles) and bfloat16 exactly; float32 to the last bit or so,
    # where eager's vectorised chunks round differently
    tol = 0 if dtype in (torch.int64, torch.bfloat16) else 1e-6
    if tol == 0 and steps > 1 and (end - start) % (steps - 1) and inexact_float32_math():
        # an inexact step: the value at an exact integer, truncated or rounded to bfloat16,
        # lands on the neighbouring value when the division is an ulp off
        pytest.skip(inexact_float32_math())
    check_op(lambda s, e: torch.linspace(s, e, steps, dtype=dtype, device=s.device), torch.tensor(start),
             torch.tensor(float(end)), rtol=tol, atol=tol)
    check_op(lambda s: torch.linspace(s, end, steps, dtype=dtype, device=s.device), torch.tensor(start),
             rtol=tol, atol=tol)
    assert host_fallbacks() == []


def test_resize_as_is_resize_to_the_template_shape(dev):
    x = torch.arange(12.0).reshape(3, 4)
    y = torch.zeros(2, 5)
    check_op(lambda a, b: a.clone().resize_as_(b)[:2, :2], x, y)  # shrinking keeps the leading values
    check_op(lambda a, b: a.clone().resize_as_(b), x, torch.zeros(2, 2, 3))
    assert host_fallbacks() == []


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_linear_cross_entropy_runs_its_python_on_the_device_with_grads(reduction):
    opts = pytest.importorskip("torch.nn.modules.linear_cross_entropy_options")  # torch >= 2.13
    options = opts.LinearCrossEntropyOptions(allow_retain_graph=True, batch_chunk_size=3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, generator=g).requires_grad_()
    w = torch.randn(6, 5, generator=g).requires_grad_()
    b = torch.randn(6, generator=g).requires_grad_()
    target = torch.tensor([0, 5, 2, -100, 1, 1, 3])  # one ignored row
    check_op(lambda x, w, b, t: torch.nn.functional.linear_cross_entropy(
        x, w, t, linear_bias=b, reduction=reduction, options=options), x, w, b, target, rtol=1e-4, atol=1e-5)
    assert host_fallbacks() == []


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("concatenated", [False, True])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_and_gradient_like_eager(reduction, concatenated, zero_infinity):
    g = torch.Generator().manual_seed(0)
    T, N, C = 6, 4, 5
    log_probs = torch.randn(T, N, C, generator=g).log_softmax(2).requires_grad_()
    target_lengths = [3, 0, 2, 4]  # the last cannot fit 4 labels (with a repeat) in 4 frames
    targets = torch.tensor([[1, 2, 2, 0], [0, 0, 0, 0], [4, 1, 0, 0], [3, 3, 3, 3]])
    if concatenated:
        targets = torch.cat([t[:n] for t, n in zip(targets, target_lengths)])
    # lengths as lists, and as tensors (read to the host: log-alpha's shape depends on them)
    check_op(lambda lp, tg: torch.nn.functional.ctc_loss(lp, tg, [6, 3, 5, 4], target_lengths, blank=0,
                                                         reduction=reduction, zero_infinity=zero_infinity),
             log_probs, targets, rtol=1e-4, atol=1e-5)
    check_op(lambda lp, tg, il, tl: torch.nn.functional.ctc_loss(lp, tg, il, tl, reduction=reduction,
                                                                 zero_infinity=zero_infinity),
             log_probs, targets, torch.tensor([6, 3, 5, 4]), torch.tensor(target_lengths),
             rtol=1e-4, atol=1e-5)
    assert host_fallbacks() == []
