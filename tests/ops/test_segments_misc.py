"""Segment reductions, put, nonzero_static, hash_tensor, random multinomial/rrelu and
the other ops of issue #15's "misc" family (lower/segments.py, indexing.py,
selection.py, reductions.py, random.py): values and gradients against eager CPU, and no
host fallback."""
import pytest
import torch

import lazyxla as lx
from helpers import check_op, host_fallbacks

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
    x = torch.tensor([[1.5, -2.0, 0.0, -0.0], [INF, -INF, 1e30, 7.0]])
    if not dtype.is_floating_point:
        x = torch.tensor([[1, -2, 0, 127], [-128, 5, 3, 3]]).to(dtype)
    check_op(lambda t: torch.hash_tensor(t), x.to(dtype))
    check_op(lambda t: torch.hash_tensor(t, 1, keepdim=True), x.to(dtype))
    check_op(lambda t: torch.hash_tensor(t, (0, 1)), x.to(dtype))
    assert host_fallbacks() == []
