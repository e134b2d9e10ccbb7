"""With LAZYXLA_CROSSING_READS=1, a host read computes what pending work outside it needs, not
that work (sync/crossing.py): the loss read after `backward()` leaves the gradients pending,
values as eager's."""
import dataclasses
import gc

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from helpers import assert_close, counter


compiles: list = []   # UncachedCompile after each step of `train` (the caller clears it)


@pytest.fixture(autouse=True)
def crossing_on(monkeypatch):
    """The rule is off by default (LAZYXLA_CROSSING_READS): these tests turn it on."""
    monkeypatch.setattr(config, "SETTINGS", dataclasses.replace(config.SETTINGS, crossing_reads=True))


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


def train(device, steps: int = 4, accumulation: int = 1, after_read=None) -> tuple[list, list]:
    """The Trainer's loop in small: each micro-batch's loss read for a nan/inf check after its
    backward, then the optimizer's step. (losses, parameters after the last step).
    `after_read(model)`: called after each lazy micro-batch's read."""
    after_read = None if device == "cpu" else after_read
    model = mlp().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        for _ in range(accumulation):
            x, y = torch.randn(5, 8, generator=gen).to(device), torch.randint(0, 4, (5,), generator=gen).to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y) / accumulation
            loss.backward()
            assert not (torch.isnan(loss) or torch.isinf(loss))
            if after_read is not None:
                after_read(model)
            losses.append(loss.item())
        opt.step()
        opt.zero_grad()
        compiles.append(counter("UncachedCompile"))
    return losses, [p.detach().cpu() for p in model.parameters()]


def assert_like_eager(device, **kwargs) -> None:
    losses, params = train("cpu", **kwargs)
    lazy_losses, lazy_params = train(device, **kwargs)
    assert_close(torch.tensor(lazy_losses), torch.tensor(losses), rtol=1e-5, atol=1e-6)
    for lazy, eager in zip(lazy_params, params):
        assert_close(lazy, eager, rtol=1e-5, atol=1e-6)


def test_the_loss_read_leaves_the_gradients_pending(dev):
    states = []
    lx.metrics.clear_all()
    compiles.clear()
    assert_like_eager(dev, after_read=lambda model: states.append(
        {lx.debug.tensor_info(p.grad)["base_state"] for p in model.parameters()}))
    assert states == [{"pending"}] * 4   # the read waited for the forward only
    # the activations the backward needs, kept for it
    assert counter("CrossingValue") > 0
    # a step's graphs as without the rule: the nan read's (the forward, now), the inf check's
    # (one op on the loss: the suite turns host replay off, conftest.py) and the barrier's
    # (the backward, now, and the update); no compile after step 2
    assert counter("ExecuteComputation") == 12 and compiles[-1] == compiles[-3]


def test_switched_off_the_read_computes_the_gradients(dev, monkeypatch):
    monkeypatch.setattr(config, "SETTINGS", dataclasses.replace(config.SETTINGS, crossing_reads=False))
    states = []
    lx.metrics.clear_all()
    compiles.clear()
    assert_like_eager(dev, after_read=lambda model: states.append(
        {lx.debug.tensor_info(p.grad)["base_state"] for p in model.parameters()}))
    assert states == [{"device data"}] * 4 and counter("CrossingValue") == 0
    assert counter("ExecuteComputation") == 12 and compiles[-1] == compiles[-3]


def test_one_micro_batch_of_activations_is_held_at_a_time(dev):
    lx.metrics.clear_all()
    compiles.clear()
    assert_like_eager(dev, steps=3, accumulation=3)
    once = counter("CrossingValue") // 6
    # micro-batches 1 and 3 keep their activations; the second reads the first's, so it
    # computes the gradients (the first's backward with its own) instead of holding two sets
    assert once > 0 and counter("CrossingValue") == 6 * once
    assert counter("ExecuteComputation") == 21 and compiles[-1] == compiles[-2]


def test_a_cache_written_before_the_read_is_materialized(dev):
    """A live tensor updated in place inside the read's graph (a K/V cache) is computed into
    its storage by the read, as before; what only the pending update needs is kept."""
    cache = torch.zeros(4, 3).to(dev)
    lx.sync()
    w = torch.randn(3, 3).to(dev)
    k = w * 2
    cache[1].copy_(k[0])                 # the cache write the read's value depends on
    logits = cache.sum(0) @ w
    other = torch.zeros(3, 3).to(dev)
    other.add_((k * 3).exp())            # pending work outside the read that uses `k`
    del k                                # (a live `k` would be computed into its storage)
    lx.metrics.clear_all()
    assert logits.argmax().item() == (cache.cpu().sum(0) @ w.cpu()).argmax().item()
    assert lx.debug.tensor_info(cache)["state"] == "device data"
    assert lx.debug.tensor_info(other)["state"] == "pending" and counter("CrossingValue") == 1
    assert_close(other, (w.cpu() * 6).exp(), rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(cache.cpu()[1], w.cpu()[0] * 2)


def test_a_view_of_device_data_is_computed_again_not_held(dev):
    """Linear's backward reads the transposed weight its forward made: a view of device
    data, computed again by the backward's graph rather than held as a copy; the ReLU's
    output (real work) is held."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 4).to(dev)
    x = torch.randn(2, 6).to(dev).requires_grad_()
    lx.sync()
    out = lin(x).relu().sum()
    out.backward()
    gc.collect()   # the ReLU's output autograd saved: dead, but a live tensor until collected
    lx.metrics.clear_all()
    lin_cpu = torch.nn.Linear(6, 4)
    lin_cpu.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    x_cpu = x.detach().cpu().requires_grad_()
    expected = lin_cpu(x_cpu).relu().sum()
    expected.backward()
    assert out.item() == pytest.approx(expected.item(), rel=1e-6)
    assert lx.debug.tensor_info(x.grad)["state"] == "pending" and counter("CrossingValue") == 1
    assert_close(x.grad, x_cpu.grad, rtol=1.3e-6, atol=1e-5)
    assert_close(lin.weight.grad, lin_cpu.weight.grad, rtol=1.3e-6, atol=1e-5)
