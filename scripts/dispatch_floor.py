"""What a Python tensor subclass costs per op before it does any work, next to lazyxla.

    python scripts/dispatch_floor.py [--ops 2000] [--rounds 5]

Times the W4 trace bench's chain (`y = y * 1.01`, 2,000 ops on a 4 x 4 tensor) three
ways in one process: eager CPU; `Null`, a wrapper subclass whose `__torch_dispatch__`
only makes its output tensor (the least any `__torch_dispatch__` runtime pays per op:
torch's Python dispatch and one wrapper); and lazyxla's tracing. Prints the best
round of each in microseconds per op, wall clock and this thread's CPU time (which a
machine shared with other work disturbs far less). PyTorch/XLA traces in C++ below this floor.
"""
from __future__ import annotations

import argparse
import time

import torch

import lazyxla as lx


class Null(torch.Tensor):
    """A wrapper subclass that records nothing: each op returns a fresh wrapper."""

    @staticmethod
    def __new__(cls, shape):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32, device="meta")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return Null(args[0].shape)


def per_op_us(x: torch.Tensor, ops: int, after=lambda: None) -> tuple[float, float]:
    """(wall, this thread's CPU) microseconds per op of the chain."""
    y = x
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(ops):
        y = y * 1.01
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
    after()
    return elapsed / ops * 1e6, cpu / ops * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cases = {"eager CPU": (torch.randn(4, 4), lambda: None),
             "Null subclass (floor)": (Null((4, 4)), lambda: None),
             "lazyxla trace": (torch.randn(4, 4).to(lx.device()), lx.sync)}
    for name, (x, after) in cases.items():
        rounds = [per_op_us(x, args.ops, after) for _ in range(args.rounds)]
        print(f"{name:24s} {min(r[0] for r in rounds):6.2f} us/op   CPU {min(r[1] for r in rounds):6.2f} us/op")


if __name__ == "__main__":
    main()
