"""Indexing, gather/scatter, index_* ops, embedding and shape-building ops
against eager CPU (forward and backward)."""
import pytest
import torch
import torch.nn.functional as F

import lazyxla as lx
from helpers import assert_no_fallback, check_op
from helpers import randn_grad as _x

LOW = [(torch.float32, 1e-5, 1e-6), (torch.bfloat16, 2e-2, 2e-2), (torch.float16, 2e-3, 2e-3)]


# -- gather / scatter ----------------------------------------------------------------

@pytest.mark.parametrize("dtype,rtol,atol", LOW)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, rtol, atol, dim):
    x = _x(4, 5, dtype=dtype)
    idx = torch.randint(0, x.shape[dim], (3, 2))  # smaller than x in the other dim too
    check_op(lambda t, i: torch.gather(t, dim, i), x, idx, rtol=rtol, atol=atol)
    assert_no_fallback("gather", "scatter_add")


def test_gather_0d_and_3d():
    check_op(lambda t, i: torch.gather(t, 0, i), _x(), torch.tensor(0))
    x = _x(3, 4, 5)
    check_op(lambda t, i: t.gather(1, i), x, torch.randint(0, 4, (3, 6, 5)))


@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_src_and_value(dim):
    x = _x(4, 6)
    # a permutation per row/column so that no position is written twice
    idx = torch.argsort(torch.rand(4, 6), dim=dim)[:3] if dim == 0 else torch.argsort(torch.rand(4, 6), dim=1)[:, :3]
    src = _x(*idx.shape)
    check_op(lambda t, i, s: torch.scatter(t, dim, i, s), x, idx, src)
    check_op(lambda t, i: torch.scatter(t, dim, i, 2.5), x, idx)
    check_op(lambda t, i: t.clone().scatter_(dim, i, -1.0), x, idx)
    assert_no_fallback("scatter")


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_legacy_reduce(reduce):
    x = torch.randn(4, 6)
    idx = torch.randint(0, 4, (5, 6))
    src = torch.randn(5, 6)
    check_op(lambda t, i, s: torch.scatter(t, 0, i, s, reduce=reduce), x, idx, src)
    check_op(lambda t, i: torch.scatter(t, 0, i, 1.5, reduce=reduce), x, idx)


@pytest.mark.parametrize("dtype,rtol,atol", LOW)
def test_scatter_add_duplicates(dtype, rtol, atol):
    x = _x(5, 3, dtype=dtype)
    src = _x(8, 3, dtype=dtype)
    idx = torch.randint(0, 5, (8, 3))
    check_op(lambda t, i, s: torch.scatter_add(t, 0, i, s), x, idx, src, rtol=rtol, atol=atol)
    check_op(lambda t, i, s: t.scatter_add(-1, i, s), _x(3, 5, dtype=dtype), torch.randint(0, 5, (3, 7)),
             _x(3, 7, dtype=dtype), rtol=rtol, atol=atol)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x = torch.randn(6, 4)
    src = torch.randn(10, 4)
    idx = torch.randint(0, 4, (10, 4))  # rows 4, 5 of x are never written
    check_op(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)
    grad_ok = reduce in ("sum", "mean")
    check_op(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self),
             x.requires_grad_(grad_ok), idx, src.requires_grad_(grad_ok), backward=grad_ok)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
def test_scatter_reduce_int(reduce):
    x = torch.randint(-5, 5, (6, 3))
    src = torch.randint(-5, 5, (9, 3))
    idx = torch.randint(0, 4, (9, 3))
    for include_self in (True, False):
        check_op(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)


# -- index_* along one dim ---------------------------------------------------------

@pytest.mark.parametrize("dtype,rtol,atol", LOW)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dtype, rtol, atol, dim):
    x = _x(4, 5, 3, dtype=dtype)
    idx = torch.tensor([0, 2, 1, 2])
    check_op(lambda t, i: torch.index_select(t, dim, i), x, idx, rtol=rtol, atol=atol)
    assert_no_fallback("index_select", "index_add")


def test_index_select_0d_index_and_int_data():
    check_op(lambda t, i: t.index_select(1, i), _x(3, 4), torch.tensor(2))
    check_op(lambda t, i: t.index_select(0, i), torch.arange(10), torch.tensor([9, 0, 3]))


@pytest.mark.parametrize("dim", [0, -1])
def test_index_add_copy_fill(dim):
    x = _x(5, 4)
    idx = torch.tensor([3, 0, 3]) if dim == 0 else torch.tensor([1, 3, 1])
    n = len(idx)
    src = _x(n, 4) if dim == 0 else _x(5, n)
    check_op(lambda t, i, s: torch.index_add(t, dim, i, s, alpha=0.5), x, idx, src)
    check_op(lambda t, i, s: t.clone().index_add_(dim, i, s), x, idx, src)
    uniq = torch.tensor([3, 0])
    usrc = _x(2, 4) if dim == 0 else _x(5, 2)
    check_op(lambda t, i, s: torch.index_copy(t, dim, i, s), x, uniq, usrc)
    check_op(lambda t, i: t.index_fill(dim, i, -2.0), x, idx)
    check_op(lambda t, i: t.clone().index_fill_(dim, i, 7.0), x, idx)
    check_op(lambda t, i, v: t.index_fill(dim, i, v), x, idx, torch.tensor(3.0).requires_grad_())
    assert_no_fallback("index_add", "index_copy", "index_fill")


def test_index_add_bfloat16():
    x = torch.randn(6, 3).bfloat16()
    idx = torch.tensor([0, 0, 5, 2, 0])
    check_op(lambda t, i, s: t.index_add(0, i, s), x, idx, torch.randn(5, 3).bfloat16(), rtol=2e-2, atol=2e-2)


# -- advanced indexing ---------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda t, i, j: t[i],
    lambda t, i, j: t[:, j],
    lambda t, i, j: t[i, j[:3]],
    lambda t, i, j: t[i[:, None], j[:2]],          # broadcast index tensors
    lambda t, i, j: t[..., j],
    lambda t, i, j: t[i, :, j[:3]],                # separated advanced indices -> front
    lambda t, i, j: t[None, i],
    lambda t, i, j: t[1:, j[:3]],
])
def test_index_tensor(fn):
    x = _x(5, 6, 7)
    i = torch.tensor([4, -1, 0])                   # negative indices wrap
    j = torch.tensor([2, -3, 0, 5])
    check_op(fn, x, i, j)
    assert_no_fallback("index", "_unsafe_index", "index_put", "_unsafe_index_put", "_index_put_impl_")


@pytest.mark.parametrize("dtype,rtol,atol", LOW)
def test_index_tensor_dtypes(dtype, rtol, atol):
    check_op(lambda t, i: t[i] * 2, _x(6, 3, dtype=dtype), torch.tensor([[0, 5], [-2, 1]]), rtol=rtol, atol=atol)


def test_index_bool_mask_goes_through_nonzero_on_host():
    x = torch.randn(5, 6)
    mask = x > 0
    check_op(lambda t, m: t[m], x.requires_grad_(), mask)
    check_op(lambda t, m: t[:, m[0]], x, mask)
    assert lx.metrics.counter_value("aten::index") is None      # the gather itself stays on the device
    check_op(lambda t: t[torch.tensor(True)], x)                  # 0-d mask: host fallback


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    x = _x(5, 6)
    i = torch.tensor([4, -1, 0]) if accumulate else torch.tensor([4, 1, 0])
    j = torch.tensor([0, 2, -1])
    v = _x(3)
    check_op(lambda t, v: t.index_put((i.to(t.device), j.to(t.device)), v, accumulate=accumulate), x, v)
    check_op(lambda t, v: t.index_put((i.to(t.device),), v[:, None], accumulate=accumulate), x, v)
    check_op(lambda t, v: torch.ops.aten.index_put(t, [None, j.to(t.device)], v, accumulate), x, v)
    check_op(lambda t: t.clone().index_put_((i.to(t.device),), torch.tensor(2.0), accumulate=accumulate), x)
    assert_no_fallback("index_put", "_unsafe_index_put", "index_put_", "_index_put_impl_")


def test_setitem_forms():
    def fn(t, i):
        y = t.clone()
        y[i] = 3.0
        y[:, i[:2]] += 1.0
        y[y > 1.5] = 0.0                       # mask assignment: no host trip
        y[:, t[0] > 0] *= 2.0
        return y
    x = _x(5, 5)
    check_op(fn, x, torch.tensor([1, -1, 2]))
    # only reads through a mask (y[:, mask] forward, and its gradient's read of
    # the written values) need the mask on the host; writes never do
    assert lx.metrics.counter_value("aten::nonzero") == 2
    assert_no_fallback("index_put", "_index_put_impl_", "index_put_")


@pytest.mark.parametrize("accumulate", [False, True])
def test_mask_put_selecting_nothing(accumulate):
    """A mask that selects nothing writes nothing: its values have 0 rows along the mask's dim."""
    def fn(t):
        y = t.clone()
        none = t[0] > 1e9
        y[:, none] = y[:, none] * 2.0       # values of shape (5, 0)
        y.index_put_((none,), torch.zeros(0, 5, device=t.device), accumulate=accumulate)
        return y
    check_op(fn, _x(5, 5))


def test_mask_put_values_tensor():
    x = torch.randn(4, 5)
    mask = x > 0
    k = int(mask.sum())

    def fn(t, m, v):
        y = t.clone()
        y[m] = v
        return y
    check_op(fn, x.requires_grad_(), mask, torch.randn(k).requires_grad_())
    row_mask = torch.tensor([True, False, True, True])

    def rows(t, m, v):
        y = t * 1
        y[m] = v
        return y
    check_op(rows, x, row_mask, torch.randn(3, 5).requires_grad_())
    check_op(rows, x, row_mask, torch.randn(5).requires_grad_())       # broadcast over the selected rows
    check_op(rows, x.detach(), row_mask, torch.randn(3, 5))
    assert_no_fallback("index_put")


def test_index_put_accumulate_mask_and_half():
    x = torch.randn(4, 5).half()
    mask = torch.rand(4, 5) > 0.5
    check_op(lambda t, m: t.index_put((m,), torch.tensor(1.0, dtype=torch.half), accumulate=True), x, mask,
             rtol=1e-3, atol=1e-3)


def test_masked_scatter():
    x = _x(4, 5)
    mask = torch.rand(4, 5) > 0.5
    src = _x(20)
    check_op(lambda t, m, s: t.masked_scatter(m, s), x, mask, src)
    check_op(lambda t, m, s: t.masked_scatter(m, s), x, mask[0], src)  # broadcast mask
    assert_no_fallback("masked_scatter", "masked_scatter_backward")


# -- embedding ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,rtol,atol", LOW)
def test_embedding(dtype, rtol, atol):
    w = _x(10, 4, dtype=dtype)
    idx = torch.tensor([[1, 2, 1], [9, 0, 1]])
    check_op(lambda w, i: F.embedding(i, w), w, idx, rtol=rtol, atol=atol)
    check_op(lambda w, i: F.embedding(i, w, padding_idx=1), w, idx, rtol=rtol, atol=atol)
    check_op(lambda w, i: F.embedding(i, w, scale_grad_by_freq=True), w, idx, rtol=rtol, atol=atol)
    assert_no_fallback("embedding", "embedding_dense_backward", "index", "index_put")


def test_nn_embedding_module(dev):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 8, padding_idx=0)
    emb_d = torch.nn.Embedding(20, 8, padding_idx=0).to(dev)
    emb_d.load_state_dict(emb.state_dict())
    idx = torch.randint(0, 20, (4, 7))
    idx[0, 0] = 0
    emb(idx).pow(2).sum().backward()
    emb_d(idx.to(dev)).pow(2).sum().backward()
    torch.testing.assert_close(emb_d.weight.grad.cpu(), emb.weight.grad)
    assert_no_fallback("embedding", "embedding_dense_backward")


def test_one_hot():
    idx = torch.tensor([[0, 3], [2, 1]])
    check_op(lambda i: F.one_hot(i, 5), idx)
    check_op(lambda i: F.one_hot(i, 4).float() * 2, idx)


# -- cat, stack, pad, flip, roll, repeat, tril/triu -------------------------------------------

@pytest.mark.parametrize("dtype,rtol,atol", LOW)
def test_cat_stack(dtype, rtol, atol):
    a, b = _x(2, 3, dtype=dtype), _x(4, 3, dtype=dtype)
    check_op(lambda a, b: torch.cat([a, b]), a, b, rtol=rtol, atol=atol)
    check_op(lambda a, b: torch.cat([a, b.T[:2]], dim=-1), a, b, rtol=rtol, atol=atol)
    check_op(lambda a, b: torch.stack([a, b[:2], a * 2], dim=1), a, b, rtol=rtol, atol=atol)
    check_op(lambda a, b: torch.stack([a, b[1:3]], dim=-1), a, b, rtol=rtol, atol=atol)
    assert_no_fallback("cat", "stack")


def test_cat_promotes_and_skips_legacy_empty():
    check_op(lambda a, b: torch.cat([a, b]), torch.arange(6).reshape(2, 3), torch.randn(1, 3))
    check_op(lambda a, e: torch.cat([a, e, a]), _x(2, 3), torch.empty(0))


@pytest.mark.parametrize("pad", [(1, 2), (0, 1, 2, 0), (-1, 2), (1, 1, -1, 0), (0, 0, 0, 0, 1, 1)])
def test_constant_pad(pad):
    x = _x(2, 3, 4)
    check_op(lambda t: F.pad(t, pad), x)
    check_op(lambda t: F.pad(t, pad, value=-1.5), x)
    check_op(lambda t: torch.constant_pad_nd(t, pad, 2), torch.arange(24).reshape(2, 3, 4))
    assert_no_fallback("constant_pad_nd", "pad")


@pytest.mark.parametrize("fn", [
    lambda t: t.flip(0), lambda t: t.flip(-1, 1), lambda t: torch.roll(t, 2, 0),
    lambda t: torch.roll(t, (-1, 3), (1, -1)), lambda t: torch.roll(t, 5),
    lambda t: t.repeat(2, 1, 3), lambda t: t.repeat(2, 1, 1, 2),
    lambda t: t.tril(), lambda t: t.triu(1), lambda t: t.tril(-1), lambda t: torch.triu(t, -2),
])
def test_flip_roll_repeat_tri(fn):
    check_op(fn, _x(2, 3, 4))
    check_op(fn, torch.arange(24).reshape(2, 3, 4))
    assert_no_fallback("flip", "roll", "repeat", "tril", "triu")


def test_view_scatter_ops():
    x = _x(4, 5)
    check_op(lambda t, s: torch.select_scatter(t, s, 0, -1), x, _x(5))
    check_op(lambda t, s: torch.slice_scatter(t, s, 1, 1, 5, 2), x, _x(4, 2))
    check_op(lambda t, s: torch.diagonal_scatter(t, s, 1), x, _x(4))
    check_op(lambda t, s: torch.as_strided_scatter(t, s, (2, 2), (5, 1), 1), x, _x(2, 2))
    assert_no_fallback("select_scatter", "slice_scatter", "diagonal_scatter", "as_strided_scatter")


def test_cpu_index_tensors_on_device_tensor(dev):
    # like CUDA tensors, device tensors accept CPU index tensors and masks
    x = torch.randn(5, 4)
    i = torch.tensor([0, -2])
    m = x[:, 0] > 0
    xd = x.to(dev)
    assert torch.equal(xd[i].cpu(), x[i])
    assert torch.equal(xd[m].cpu(), x[m])
    assert torch.equal(xd[x > 0].cpu(), x[x > 0])
    y, yd = x.clone(), xd.clone()
    y[i] = 2.0
    yd[i] = 2.0
    y[m] += 1.0
    yd[m] += 1.0
    y[1:][i[:1]] = -1.0                     # through a view
    yd[1:][i[:1]] = -1.0
    y.index_put_((i,), torch.tensor(5.0), accumulate=True)
    yd.index_put_((i,), torch.tensor(5.0), accumulate=True)
    assert torch.equal(yd.cpu(), y)
    assert [n for n in lx.metrics.counter_names() if n.startswith("aten::")] == []


def test_scatter_src_larger_than_index_and_bf16_reduce():
    x = torch.randn(4, 6)
    src = torch.randn(5, 7)                        # only src[:3, :2] is read
    idx = torch.tensor([[0, 1], [2, 3], [1, 0]])
    check_op(lambda t, i, s: torch.scatter(t, 0, i, s), x, idx, src)
    check_op(lambda t, i, s: torch.scatter_add(t, 1, i, s), x, idx, src)
    xb, sb = torch.randn(4, 3).bfloat16(), torch.randn(6, 3).bfloat16()
    ib = torch.randint(0, 4, (6, 3))
    for reduce in ("sum", "mean", "amax"):
        check_op(lambda t, i, s: t.scatter_reduce(0, i, s, reduce), xb, ib, sb, rtol=2e-2, atol=2e-2)
