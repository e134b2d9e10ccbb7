"""Threads (docs/reliability.md, "Concurrency"): one re-entrant runtime lock
(lazyxla.lock.LOCK) held by every op trace and every sync, so each traced op and
each sync is atomic with respect to the others; a step barrier from any thread
is a barrier for all live tensors of the device."""
from __future__ import annotations

import copy
import threading

import pytest
import torch

import lazyxla as lx


def _problem(seed: int, steps: int = 5):
    """A small model (built on the CPU, from the global RNG: so never inside a thread)
    and its data."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    gen = torch.Generator().manual_seed(1000 + seed)
    xs = [torch.randn(6, 8, generator=gen) for _ in range(steps)]
    ys = [torch.randn(6, 4, generator=gen) for _ in range(steps)]
    return model, xs, ys


def _train(problem, dev):
    """Linear+ReLU+Linear, SGD with momentum, one lx.sync() per step. Returns
    (per-step losses, final parameters) on the CPU."""
    model, xs, ys = problem
    model = copy.deepcopy(model).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in zip(xs, ys):
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if dev.type == "lazyxla":
            lx.sync()
        losses.append(loss)
    return [l.item() for l in losses], [p.detach().cpu() for p in model.parameters()]


def _run_threads(fns):
    results, errors = [None] * len(fns), []

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "thread hung"
    if errors:
        raise errors[0]
    return results


def _assert_same_run(a, b):
    (la, pa), (lb, pb) = a, b
    torch.testing.assert_close(torch.tensor(la), torch.tensor(lb), rtol=1e-5, atol=1e-6)
    for x, y in zip(pa, pb):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_threads_train_separate_models_like_sequential(dev):
    problems = [_problem(1), _problem(2)]
    sequential = [_train(p, dev) for p in problems]
    for _ in range(3):  # a few rounds: different interleavings
        concurrent = _run_threads([lambda p=p: _train(p, dev) for p in problems])
        for s, c in zip(sequential, concurrent):
            _assert_same_run(s, c)
    # and the lazy runs agree with eager CPU
    for p, s in zip(problems, sequential):
        _assert_same_run(_train(p, torch.device("cpu")), s)


def test_concurrent_tracing_and_syncs_keep_every_thread_correct(dev):
    """Several threads trace in-place updates, views and reads while the others run
    step barriers and partial syncs; every thread's values match eager CPU."""
    n_threads, iters = 4, 25
    barrier = threading.Barrier(n_threads)

    def worker(k: int):
        barrier.wait()
        gen = torch.Generator().manual_seed(k)
        host = torch.randint(-3, 4, (3, 4), generator=gen).float()
        lazy = host.to(dev)
        keep = []  # tensors kept alive (and read at the end)
        for i in range(iters):
            for t in (host, lazy):
                t.mul_(-1).add_(k + i)
                t[1:3, 0].add_(2)
                t.select(1, 2).mul_(0.5)
            keep.append((lazy.sum(1), host.sum(1)))
            keep.append((lazy.t()[1] * 1, host.t()[1] * 1))
            if i % 5 == k % 5:
                lx.sync()
            elif i % 7 == 3:
                lx.sync_tensors([lazy], donate_inplace=True)
            elif i % 11 == 4:
                torch.testing.assert_close(lazy.cpu(), host)
        for lz, h in keep:
            torch.testing.assert_close(lz.cpu(), h)
        torch.testing.assert_close(lazy.cpu(), host)
        return True

    assert all(_run_threads([lambda k=k: worker(k) for k in range(n_threads)]))


def test_explicit_donation_across_threads_only_kills_marked_tensors(dev):
    """Thread A marks and donates its own buffers at its barriers; thread B's
    tensors, synced by A's barriers at arbitrary points, are never invalidated."""
    steps = 15
    barrier = threading.Barrier(2)

    def marker():
        barrier.wait()
        for i in range(steps):
            p = torch.full((64,), float(i)).to(dev)
            assert lx.set_buffer_donation(p)
            q = p * 2
            lx.sync()
            assert lx.is_donated(p)
            assert q[0].item() == 2.0 * i
        return True

    def trainer():
        barrier.wait()
        w = torch.zeros(64).to(dev)
        for i in range(steps * 3):
            w.add_(1)
            if i % 4 == 0:
                lx.sync()
        assert not lx.is_donated(w)
        return w.sum().item()

    results = _run_threads([marker, trainer])
    assert results[1] == 64.0 * steps * 3


def test_lock_is_reentrant_and_shared(dev):
    from lazyxla.lock import LOCK
    from lazyxla.sync import entry
    assert entry.LOCK is LOCK   # the one every sync entry point takes
    with LOCK:  # user code may hold it around a sequence of ops to make it atomic
        x = torch.ones(3, device=dev) + 1
        lx.sync()
        assert x.tolist() == [2.0] * 3
