"""Threads and DataLoader workers while training (docs/reliability.md, "Concurrency"):
eager's values or a clear error, never a hang, crash or wrong value.

* the main thread trains from a `DataLoader` with worker processes while a second thread
  runs lazy ops (and host reads, and its own syncs) on tensors of its own: both give the
  eager CPU values;
* a dataset that makes lazyxla tensors inside a worker process (forked after the device
  runtime started, where JAX would hang) raises `ForkedRuntimeError` in the main process.
"""
from __future__ import annotations

import copy
import threading

import pytest
import torch

import lazyxla as lx
from helpers import assert_close

pytestmark = pytest.mark.filterwarnings("ignore:os.fork")


class _Batches(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(8, generator=g), torch.randn(4, generator=g)


def _train(dev, loader) -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if dev.type == "lazyxla":
            lx.sync()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def _side_work(dev, rounds: int) -> list:
    """Lazy ops on tensors of this thread's own: a matrix power chain, read every round."""
    g = torch.Generator().manual_seed(7)
    a = (torch.randn(16, 16, generator=g) / 4).to(dev)
    v = torch.ones(16, device=dev)
    out = []
    for i in range(rounds):
        v = torch.tanh(a @ v + i)
        if i % 3 == 0 and dev.type == "lazyxla":
            lx.sync_tensors([v])
        out.append(v.sum().item())
    return out


def test_loader_workers_and_a_second_thread_give_eager_values(dev):
    loader = torch.utils.data.DataLoader(_Batches(), batch_size=4, num_workers=2)
    eager_train = _train(torch.device("cpu"), loader)
    eager_side = _side_work(torch.device("cpu"), 40)

    side: dict = {}

    def run_side():
        try:
            side["values"] = _side_work(dev, 40)
        except BaseException as e:  # noqa: BLE001
            side["error"] = e
    thread = threading.Thread(target=run_side)
    thread.start()
    trained = _train(dev, copy.copy(loader))
    thread.join(timeout=300)
    assert not thread.is_alive(), "the second thread hung"
    assert "error" not in side, side.get("error")
    assert_close(torch.tensor(trained[0]), torch.tensor(eager_train[0]), rtol=1e-5, atol=1e-6)
    for got, want in zip(trained[1], eager_train[1]):
        assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close(torch.tensor(side["values"]), torch.tensor(eager_side), rtol=1e-5, atol=1e-5)


class _LazyInWorker(torch.utils.data.Dataset):
    def __init__(self, dev) -> None:
        self.dev = dev

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        big = torch.arange(4096.0).to(self.dev)     # an upload: JAX, in the forked worker
        return (big * i).cpu()


def test_lazy_tensors_in_a_forked_worker_are_a_clear_error(dev):
    (torch.ones(3, device=dev) + 1).cpu()     # the device runtime runs in this process
    loader = torch.utils.data.DataLoader(_LazyInWorker(dev), batch_size=2, num_workers=1, timeout=120)
    with pytest.raises(lx.ForkedRuntimeError, match="forked from one whose device runtime .* DataLoader worker"):
        next(iter(loader))
    # this process goes on as before
    assert (torch.ones(3, device=dev) * 2).cpu().tolist() == [2.0, 2.0, 2.0]
