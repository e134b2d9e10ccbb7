"""W2's op families one at a time, at W2's shapes: eager CPU against lazyxla on XLA:CPU.

    python scripts/w2_family_bench.py [--reps N] [--rounds R]

Each family is a small torch function run (a) eagerly on the CPU and (b) on the
lazyxla device followed by `lx.sync()` and a wait (one cached graph per call).
Reported: the minimum over N calls, per round, eager and lazyxla interleaved, and
the median of the per-round minima. Minima, because on a shared 2-core machine a
median measures the other tenants (torch's OpenMP threads spin-wait badly under
contention: medians 30x the minimum were seen). The "sync floor" row is a graph of
one tiny op: lazyxla's fixed per-graph cost, contained in every lazyxla figure.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

import lazyxla as lx
from lazyxla import workloads
from lazyxla.bench.plan import GPT_SIZES

_W2 = workloads.GPTConfig()   # W2's reference size (the bench's default --gpt-size)
B, T, D, H, V = GPT_SIZES["reference"][1], _W2.seq, _W2.d, _W2.heads, _W2.vocab


def _linears(dev) -> Callable:
    """W2's dense layers of one block plus the head, forward and backward."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B * T, D, generator=g).to(dev).requires_grad_()
    ws = [(torch.randn(o, i, generator=g) * 0.02).to(dev).requires_grad_()
          for i, o in ((D, 3 * D), (D, D), (D, 4 * D), (4 * D, D), (D, V))]

    def run():
        outs = [F.linear(x if w.shape[1] == D else torch.ones(B * T, 4 * D, device=dev), w) for w in ws]
        sum(o.sum() for o in outs).backward()
        return [w.grad for w in ws]
    return run


def _attention_bmm(dev) -> Callable:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, T, D // H, generator=g).to(dev).requires_grad_() for _ in range(3))

    def run():
        ((q @ k.transpose(-2, -1)) @ v).sum().backward()
        return q.grad
    return run


def _layer_norm(dev) -> Callable:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, D, generator=g).to(dev).requires_grad_()
    w, b = torch.ones(D).to(dev).requires_grad_(), torch.zeros(D).to(dev).requires_grad_()
    cot = torch.randn(B, T, D, generator=g).to(dev)

    def run():
        F.layer_norm(x, (D,), w, b).backward(cot)
        return x.grad
    return run


def _softmax(dev) -> Callable:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, H, T, T, generator=g).to(dev).requires_grad_()
    cot = torch.randn(B, H, T, T, generator=g).to(dev)

    def run():
        F.softmax(x, dim=-1).backward(cot)
        return x.grad
    return run


def _cross_entropy(dev) -> Callable:
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(B * T, V, generator=g).to(dev).requires_grad_()
    y = torch.randint(0, V, (B * T,), generator=g).to(dev)

    def run():
        F.cross_entropy(logits, y).backward()
        return logits.grad
    return run


def _adamw(dev) -> Callable:
    """W2's AdamW step (foreach) over all its parameters, gradients fixed."""
    model = workloads.make("gpt").model.to(dev)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)

    def run():
        opt.step()
        return next(iter(model.parameters()))
    return run


def _floor(dev) -> Callable:
    x = torch.ones(4).to(dev)

    def run():
        return x + 1
    return run


FAMILIES = {"sync floor": _floor, "matmul (linears)": _linears, "matmul (attention)": _attention_bmm,
            "layer_norm": _layer_norm, "softmax": _softmax, "cross_entropy": _cross_entropy,
            "AdamW step": _adamw}


def _min_ms(run: Callable, lazy: bool, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        out = run()
        if lazy:
            lx.sync()
            lx.wait_device_ops()
        best = min(best, time.perf_counter() - t0)
        del out
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    dev = lx.device()
    runs = {name: (make(torch.device("cpu")), make(dev)) for name, make in FAMILIES.items()}
    for eager_run, lazy_run in runs.values():   # warm-up: compiles, allocator, first grads
        for _ in range(3):
            eager_run()
            lazy_run()
            lx.sync()
        lx.wait_device_ops()
    mins: dict = {name: ([], []) for name in runs}
    for _ in range(a.rounds):
        for name, (eager_run, lazy_run) in runs.items():
            mins[name][0].append(_min_ms(eager_run, False, a.reps))
            mins[name][1].append(_min_ms(lazy_run, True, a.reps))
    print(f"{'family (W2 shapes)':<22}{'eager ms':>10}{'lazyxla ms':>12}{'ratio':>8}")
    for name, (e, x) in mins.items():
        em, xm = statistics.median(e), statistics.median(x)
        print(f"{name:<22}{em:>10.2f}{xm:>12.2f}{xm / em:>8.2f}")


if __name__ == "__main__":
    main()
