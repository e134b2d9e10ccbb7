"""Factories on lazy tensors, fills, the remaining scalar overloads, random ops and
the prims that PyTorch's decompositions emit."""
import pytest
import torch

import lazyxla as lx
from helpers import assert_close, check_op


@pytest.mark.parametrize("fn", [
    lambda x: x.new_full((2, 3), 3.5),
    lambda x: x.new_empty((2,)).zero_(),
    lambda x: x.new_ones((3,), dtype=torch.int64),
    lambda x: x.new_zeros((1, 2)),
    lambda x: torch.full_like(x, -2.0),
    lambda x: torch.ones_like(x, dtype=torch.int32),
    lambda x: torch.empty_like(x).fill_(torch.tensor(4.0)),
    lambda x: x.clone().fill_(2),
])
def test_factories_from_a_tensor(fn):
    check_op(fn, torch.randn(2, 3))


@pytest.mark.parametrize("fn", [
    lambda x: torch.zeros_like(x, device="cpu"),
    lambda x: torch.full_like(x, 2.5, device="cpu", dtype=torch.float64),
    lambda x: x.new_ones((2, 2), device="cpu"),
    lambda x: torch.empty_like(x, device="cpu").fill_(1),
])
def test_like_factories_honour_a_cpu_device(fn, dev):
    """The input only lends shape and dtype: device="cpu" gives a CPU tensor, as eager."""
    x = torch.randn(3, 4)
    out = fn(x.to(dev))
    assert out.device.type == "cpu" and not isinstance(out, lx.LazyTensor)
    assert torch.equal(out, fn(x))


def test_like_factories_onto_the_lazy_device_from_cpu(dev):
    z = torch.zeros_like(torch.ones(2, 3, dtype=torch.float64), device=dev)
    assert z.device == dev and z.dtype == torch.float64 and z.cpu().tolist() == [[0.0] * 3] * 2


@pytest.mark.parametrize("fn", [
    lambda x: torch.clamp_min(x, 0.5),
    lambda x: torch.clamp_max(x, 0.5),
    lambda x: torch.clamp(x, min=torch.tensor(-0.2), max=torch.tensor(0.3)),
    lambda x: torch.clamp_min(x, x.new_zeros(4)),
    lambda x: torch.clamp_max(x, x.new_zeros(4)),
    lambda x: torch.lerp(x, x.new_ones(4), x.new_full((4,), 0.25)),
    lambda x: x.masked_fill(x > 0, torch.tensor(-1.0)),
    lambda x: torch.rsub(x, x.new_ones(4)),
    lambda x: torch.where(x > 0, 1.0, -1.0),
    lambda x: torch.div(x, 2, rounding_mode="floor"),
    lambda x: torch.fmod(x, 0.7),
    lambda x: x % 0.7,
    lambda x: x.prod(),
    lambda x: x.unfold(1, 2, 1),
    lambda x: x.unsqueeze(0).unsqueeze(2).squeeze((0, 2)),
])
def test_scalar_and_tensor_overloads(fn):
    check_op(fn, torch.randn(3, 4).requires_grad_(), rtol=1e-5, atol=1e-5)


def test_int_scalar_bitwise_and_all_dims():
    x = torch.randint(0, 16, (3, 4))
    check_op(lambda t: t | 5, x)
    check_op(lambda t: t ^ 3, x)
    check_op(lambda t: (t > 2).all(dim=(0, 1)), x)
    check_op(lambda t: (t > 2).any(dim=(0, 1)), x)


def test_prims_from_decompositions(dev):
    prims = torch.ops.prims
    x = torch.randn(3, 4)
    d = x.to(dev)
    assert_close(prims.sum(d, [1]), prims.sum(x, [1]))
    assert_close(prims.var(d, [0], correction=1), prims.var(x, [0], correction=1))
    assert_close(prims.broadcast_in_dim(d[0], [2, 4], [1]), prims.broadcast_in_dim(x[0], [2, 4], [1]))
    assert_close(prims.convert_element_type(d, torch.float16), prims.convert_element_type(x, torch.float16))
    assert_close(prims.div(d, d + 5), prims.div(x, x + 5))
    assert_close(prims.cat([d, d], 0), prims.cat([x, x], 0))


def _stats(t):
    t = t.float()
    return t.mean().item(), t.std().item()


def test_random_fills_have_the_right_distributions(dev):
    torch.manual_seed(0)
    n = 200_000
    p = torch.bernoulli(torch.full((n,), 0.3, device=dev))
    assert abs(_stats(p.cpu())[0] - 0.3) < 0.01
    assert abs(_stats(torch.empty(n, device=dev).bernoulli_(0.7).cpu())[0] - 0.7) < 0.01
    probs = torch.full((n,), 0.2, device=dev)
    assert abs(_stats(torch.empty(n, device=dev).bernoulli_(probs).cpu())[0] - 0.2) < 0.01
    e = torch.empty(n, device=dev).exponential_(2.0).cpu()
    assert abs(_stats(e)[0] - 0.5) < 0.01 and e.min() >= 0
    r = torch.empty(n, dtype=torch.int64, device=dev).random_(10).cpu()
    assert r.min() == 0 and r.max() == 9
    r = torch.empty(1000, dtype=torch.int32, device=dev).random_().cpu()
    assert r.min() >= 0
    ri = torch.randint_like(torch.empty(n, device=dev), 4).cpu()
    assert set(ri.unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    ri = torch.randint_like(torch.empty(n, device=dev), 2, 5).cpu()
    assert set(ri.unique().tolist()) == {2.0, 3.0, 4.0}
    assert lx.metrics.counter_value("UncachedCompile")  # all ran on the device
    assert not [c for c in lx.metrics.counter_names() if c.startswith("aten::")]
