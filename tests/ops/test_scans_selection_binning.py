"""cummax/cummin/logcumsumexp, median/nanmedian/kthvalue/mode, searchsorted/bucketize,
histc/histogram and index_reduce on the device, against eager CPU: tie-heavy integer
inputs and NaNs check eager's choice of index (lower/scans.py, selection.py, binning.py)."""
import pytest
import torch

from helpers import check_op, host_fallbacks


def _ties(*shape, seed=0, nan=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g)
    if nan:
        x = x.float()
        x.view(-1)[:: max(1, x.numel() // 3)] = float("nan")
    return x


@pytest.mark.parametrize("make", [lambda: _ties(4, 9), lambda: _ties(4, 9).float(), lambda: _ties(3, 7, nan=True)])
def test_cumulative_extrema_and_medians_index_like_eager(make):
    x = make()
    for fn in (lambda t: torch.cummax(t, 1), lambda t: torch.cummin(t, 0), lambda t: torch.median(t, 1),
               lambda t: torch.nanmedian(t, 0), lambda t: torch.median(t), lambda t: torch.nanmedian(t)):
        check_op(fn, x)
    assert host_fallbacks() == []


def test_mode_takes_the_smallest_most_frequent_value_at_its_last_index():
    # eager sorts small slices stably (insertion sort) and keeps the last of the run
    check_op(lambda t: torch.mode(t, -1), _ties(5, 12))
    check_op(lambda t: torch.mode(t, 0, keepdim=True), _ties(9, 3).float())
    assert host_fallbacks() == []


def test_kthvalue_values_and_gradient():
    x = torch.randn(4, 6).requires_grad_()  # distinct values: the index is unique
    check_op(lambda t: torch.kthvalue(t, 3, 1), x)
    check_op(lambda t: torch.logcumsumexp(t, 1), x, rtol=1e-5, atol=1e-5)
    assert host_fallbacks() == []


def test_searchsorted_bucketize_and_histograms():
    seq = torch.tensor([[-1.0, 0.0, 0.5, 2.0], [0.0, 1.0, 1.0, 3.0]])
    vals = torch.tensor([[-2.0, 0.5, 2.0], [1.0, 3.0, 4.0]])
    check_op(lambda s, v: torch.searchsorted(s, v), seq, vals)
    check_op(lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True), seq, vals)
    check_op(lambda v, b: torch.bucketize(v, b, right=True), vals, seq[1])
    x = torch.tensor([0.0, 1.0, 1.0, 2.5, 4.0, float("nan"), -1.0])
    check_op(lambda t: torch.histc(t, bins=4, min=0, max=4), x)
    check_op(lambda t: torch.histc(t.nan_to_num(0), bins=3), x)
    check_op(lambda t: torch.histogram(t, bins=5, range=(0.0, 4.0)), x)
    check_op(lambda t, e, w: torch.histogram(t, e, weight=w, density=True),
             x.nan_to_num(0), torch.tensor([0.0, 1.0, 3.0]), torch.rand(7))
    check_op(lambda t: torch.histogram(t, bins=2), torch.tensor([1.0, 1.0]))  # widened range
    assert host_fallbacks() == []


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    x, src = torch.randn(5, 3), torch.randn(4, 3)
    index = torch.tensor([0, 4, 0, 2])
    check_op(lambda t, i, s: t.index_reduce(0, i, s, reduce, include_self=include_self), x, index, src)
    assert host_fallbacks() == []


def test_kthvalue_out_of_range_raises_like_eager(dev):
    # the meta kernel does not check k: the lowering would have read a clipped index
    for t in (torch.arange(4.0), torch.arange(4.0).to(dev)):
        with pytest.raises(RuntimeError, match="out of range for dimension 0"):
            torch.kthvalue(t, 10)


def test_histogramdd_bin_counts_ranges_weights_and_density():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 20, 3, generator=g)
    w = torch.rand(2, 20, generator=g)
    check_op(lambda t: torch.histogramdd(t, bins=[3, 4, 2]), x)
    x[0, 0] = torch.tensor([float("nan"), 0.0, 0.0])  # skipped whole (eager refuses NaN without a range)
    check_op(lambda t, w: torch.histogramdd(t, bins=[2, 2, 5], range=[-1.0, 1.0, 0.0, 2.0, -3.0, 3.0],
                                            weight=w, density=True), x, w, rtol=1e-5, atol=1e-6)
    check_op(lambda t: torch.histogramdd(t, bins=[2, 1]), torch.ones(4, 2))  # equal min/max: widened
    assert host_fallbacks() == []


def test_histogramdd_with_edge_tensors_sorted_or_not_bins_like_eager():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 2, generator=g) * 3
    x[0] = torch.tensor([2.0, 1.0])  # on the last edge of both dimensions
    sorted_edges = [torch.tensor([-2.0, 0.0, 1.0, 2.0]), torch.tensor([-4.0, -1.0, 1.0])]
    unsorted_edges = [torch.tensor([-8.0, -1.0, -4.0, 3.0, -2.0]), torch.tensor([3.0, -2.0, 5.0])]
    for edges in (sorted_edges, unsorted_edges):
        check_op(lambda t, a, b: torch.histogramdd(t, bins=[a, b]), x, *edges)
        check_op(lambda t, a, b: torch.histogramdd(t, bins=[a, b], density=True), x, *edges)
    check_op(lambda t, e: torch.histogram(t, e), x[:, 0].contiguous(), unsorted_edges[0])
    assert host_fallbacks() == []
