"""View and in-place semantics against eager PyTorch."""
import pytest
import torch

import lazyxla as lx
from helpers import assert_close


def both(fn):
    """Run `fn(make)` on CPU and on lazyxla; `make(t)` places a CPU tensor."""
    dev = lx.device()
    expected = fn(lambda t: t.clone())
    actual = fn(lambda t: t.clone().to(dev))
    assert_close(actual, expected)
    return actual


def base():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)


def test_write_through_select_view():
    def prog(make):
        x = make(base())
        x[1].add_(1)
        return x
    both(prog)


def test_setitem_column():
    def prog(make):
        x = make(base())
        x[:, 0] = 5
        return x
    both(prog)


def test_transpose_view_mul_updates_base():
    def prog(make):
        x = make(base())
        x.t().mul_(2)
        return x
    both(prog)


def test_views_see_later_writes_to_base():
    def prog(make):
        x = make(base())
        row = x[2]
        col = x[:, 1:4:2]
        flat = x.view(-1)
        x.add_(10)
        x[0, 0] = -1
        return row.clone(), col.clone(), flat.clone(), row.sum()
    both(prog)


def test_nested_views_write_through():
    def prog(make):
        x = make(base())
        v = x[1:3].transpose(0, 1)[2:5]
        v.mul_(-1)
        v[0, 1] = 100
        return x, v
    both(prog)


def test_write_through_view_of_view_updates_sibling_view():
    def prog(make):
        x = make(torch.zeros(3, 4))
        a = x[0]
        b = x[:, 1]
        a.fill_(7)
        b.add_(1)
        return a, b, x
    both(prog)


def test_unsqueeze_reshape_diagonal_writes():
    def prog(make):
        x = make(base()[:4, :4].contiguous())
        x.unsqueeze(0).sub_(1)
        x.diagonal().zero_()
        x.reshape(2, 8)[1].mul_(3)
        return x
    both(prog)


def test_detach_shares_storage():
    def prog(make):
        x = make(base())
        d = x.detach()
        d.add_(1)
        return x, d
    both(prog)


def test_inplace_dtype_cast_and_broadcast():
    def prog(make):
        x = make(torch.zeros(3, 4, dtype=torch.float16))
        x.add_(make(torch.ones(4)) * 0.5)
        i = make(torch.arange(6))
        i.mul_(3)
        return x, i
    both(prog)


def test_inplace_errors_match_eager(dev):
    x = torch.zeros(3, dtype=torch.int64, device=dev)
    with pytest.raises(RuntimeError, match="can't be cast|not possible"):
        x.add_(0.5)
    y = torch.zeros(3, device=dev)
    with pytest.raises(RuntimeError):
        y.add_(torch.ones(4, device=dev))
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.zeros(1, 3, device=dev).expand(2, 3).add_(1)


def test_shape_errors_raised_at_the_op(dev):
    a = torch.zeros(2, 3, device=dev)
    b = torch.zeros(4, 5, device=dev)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied|same reduction dim"):
        a @ b
    with pytest.raises(RuntimeError):
        a + b
    assert lx.metrics.counter_value("UncachedCompile") is None  # nothing was compiled


def test_index_ops_inplace():
    def prog(make):
        x = make(torch.zeros(5, 3))
        x.index_copy_(0, make(torch.tensor([4, 0])), make(torch.ones(2, 3)))
        x.masked_fill_(make(torch.eye(5, 3, dtype=torch.bool)), -2.0)
        x.index_put_((make(torch.tensor([1, 2])), make(torch.tensor([0, 2]))), make(torch.tensor(9.0)))
        x.scatter_(1, make(torch.tensor([[0], [1], [2], [0], [1]])), 3.0)
        return x
    both(prog)


def test_copy_between_devices(dev):
    cpu = torch.arange(6.0).reshape(2, 3)
    x = torch.zeros(2, 3, device=dev)
    x.copy_(cpu)
    assert torch.equal(x.cpu(), cpu)
    back = torch.empty(2, 3)
    back.copy_(x * 2)
    assert torch.equal(back, cpu * 2)
    x[0].copy_(torch.tensor([7.0, 8.0, 9.0]))
    assert x.tolist() == [[7.0, 8.0, 9.0], [3.0, 4.0, 5.0]]


def test_contiguous_and_strides_follow_eager(dev):
    x = torch.arange(12.0).reshape(3, 4)
    d = x.to(dev)
    assert d.t().stride() == x.t().stride()
    assert not d.t().is_contiguous()
    assert d.t().contiguous().is_contiguous()
    assert_close(d.t().contiguous().view(-1), x.t().contiguous().view(-1))
    with pytest.raises(RuntimeError):
        d.t().view(-1)


def test_views_have_eager_layouts(dev):
    # a view contiguous from offset 0 is wrapped without its strides, one at offset 0 without
    # its offset (frontend/tensor.py LazyTensor.wrap): the layout torch then gives it must be
    # eager's, for views of a base, of a view, at an offset and broadcast
    x = torch.arange(24.0).reshape(2, 3, 4)
    d = x.to(dev)
    views = (lambda t: t.view(6, 4), lambda t: t.view(24), lambda t: t[1], lambda t: t[:, 1:],
             lambda t: t.transpose(0, 2), lambda t: t[1].view(12), lambda t: t[:1].view(3, 4),
             lambda t: t[:, :1].expand(2, 5, 4), lambda t: t.unsqueeze(0), lambda t: t[0, 0],
             lambda t: t.reshape(4, 6)[1:], lambda t: t.permute(2, 0, 1)[0])
    for view in views:
        e, v = view(x), view(d)
        assert (v.shape, v.stride(), v.storage_offset(), v.is_contiguous()) == \
            (e.shape, e.stride(), e.storage_offset(), e.is_contiguous())
        assert torch.equal(v.cpu(), e)


def test_a_view_undone_reads_and_writes_its_base():
    # t().t() (every Linear weight's gradient), a transpose undone, a permute undone: the
    # same values and the same writes through to the base as in eager
    def prog(make):
        x = make(base())
        y = x.t().t()
        y.mul_(2)
        z = x.transpose(0, 1).transpose(1, 0)
        z[1].add_(100)
        w = x[1:].t().t()   # undone after a longer chain: a view of x[1:] again
        w[:, 2] = -1
        p = x.reshape(2, 2, 6).permute(2, 0, 1).permute(1, 2, 0)
        p.add_(0.5)
        return x, y, z, w, p, y + z
    both(prog)


def test_a_view_undone_leaves_no_transposes_in_the_graph():
    dev = lx.device()
    lin = torch.nn.Linear(8, 6).to(dev)
    lin(torch.randn(4, 8).to(dev)).sum().backward()
    lx.sync()
    grad = lin.weight.grad   # autograd's t() of mm's t(): the gradient's layout is the weight's
    assert grad._view is None
    assert "t.default" not in lx.debug.ir_text(grad * 2)


def test_a_view_undone_keeps_autograd():
    def prog(make):
        x = make(base()).requires_grad_()
        (x.t().t() * torch.arange(6.0).to(x.device)).sum().backward()
        return x.grad
    both(prog)
