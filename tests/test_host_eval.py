"""Small host reads replayed on the host (sync/host_eval.py): no device graph for a check on
a scalar or on constants, eager PyTorch's values, and the device path wherever the rule
does not hold."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from lazyxla.metrics import counter_value


def graphs() -> int:
    return counter_value("ExecuteComputation") or 0


def replayed() -> int:
    return counter_value("HostEvaluatedRead") or 0


@pytest.fixture(autouse=True)
def _on(host_replay):
    yield


def test_a_check_on_a_device_scalar_runs_no_graph(dev):
    loss = (torch.randn(8, 8) @ torch.randn(8, 8)).to(dev).sum()
    lx.sync()
    before = graphs()
    assert bool(torch.isinf(loss)) is False
    assert bool(torch.isnan(loss) | torch.isinf(loss)) is False
    assert (loss * 2 + 1).item() == pytest.approx(loss.item() * 2 + 1, rel=1e-6)
    assert graphs() == before and replayed() == 3


def test_the_replayed_value_is_eager_pytorchs(dev):
    host = torch.tensor(2.5, dtype=torch.float64)
    x = host.to(dev) + 0          # pending ...
    lx.sync()                     # ... then device data, a scalar
    checks = [torch.exp(x), x.to(torch.float16) * 3, torch.where(x > 2, x, -x).round(), x // 2]
    expected = [torch.exp(host), host.to(torch.float16) * 3, torch.where(host > 2, host, -host).round(),
                host // 2]
    for got, want in zip(checks, expected):
        value = got.cpu()
        assert value.dtype == want.dtype and torch.equal(value, want)
    assert replayed() == len(checks)


def test_a_read_of_constants_runs_no_graph_and_leaves_live_work_pending(dev):
    # transformers' packed-sequence check: position ids made by arange, read while a
    # pending tensor (the rest of the forward, on the weights) uses them too.
    w = torch.randn(32).to(dev)
    lx.sync()
    positions = torch.arange(32, device=dev)[None, :]
    live = positions.float() * w
    before = graphs()
    diff = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1)
    assert bool(((diff != 1).cumsum(-1)[:, -1] == 0).all()) is True
    assert graphs() == before and replayed() == 1
    assert torch.equal(live.cpu(), torch.arange(32.)[None, :] * w.cpu())   # on the device
    assert graphs() == before + 1


def test_a_scalar_read_sharing_small_work_replays(dev):
    loss = torch.tensor(3.0).to(dev)
    lx.sync()
    nan = torch.isnan(loss)          # live and pending while the next read shares it
    assert bool(nan | torch.isinf(loss)) is False
    assert bool(nan) is False
    assert graphs() == 0 and replayed() == 2


def test_the_result_is_a_fresh_tensor(dev):
    s = torch.tensor([3.0]).to(dev) + 0
    lx.sync()
    first = (s.view(()) * 1).cpu()
    first.add_(100)               # the caller's copy: the cached host value is untouched
    assert (s.view(()) * 1).item() == 3.0
    assert replayed() == 2


@pytest.mark.parametrize("case", ["tensor input", "random op", "too many elements"])
def test_outside_the_rule_the_device_computes(case, dev):
    w = torch.randn(4, 4).to(dev)
    lx.sync()
    before = graphs()
    if case == "tensor input":
        value = (w * 2).sum()
        expected = (w.cpu() * 2).sum()
    elif case == "random op":
        value = torch.rand((), device=dev) * 0
        expected = torch.tensor(0.0)
    else:
        value = torch.ones(100_000, device=dev).sum()
        expected = torch.tensor(100_000.0)
    assert value.item() == pytest.approx(expected.item(), rel=1e-5)
    assert graphs() == before + 1 and replayed() == 0


def test_a_read_sharing_work_with_live_tensors_stays_one_device_graph(dev):
    # The loss and the gradients: replaying the loss would compute the forward again.
    model = torch.nn.Linear(2, 1).to(dev)
    lx.sync()
    loss = model(torch.ones(3, 2).to(dev)).sum()
    loss.backward()
    before = graphs()
    loss.item()
    assert graphs() == before + 1 and replayed() == 0
    model.weight.grad.cpu()                                  # came with the loss
    assert graphs() == before + 1


def test_switched_off_the_device_reads(dev):
    x = torch.tensor(1.0).to(dev) + 0
    lx.sync()
    before = graphs()
    with config.override(host_read_max_elements=0):
        assert bool(torch.isinf(x)) is False
    assert graphs() == before + 1 and replayed() == 0
