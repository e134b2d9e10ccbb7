"""torch's own host cost of a W1-shaped training step, without the arithmetic.

    python scripts/eager_step_overhead.py

W1's model (three Linear layers, two ReLU), cross-entropy, `zero_grad`, backward and
foreach SGD with momentum, on 4-wide CPU tensors and one thread: what any runtime that
runs the user's unchanged step pays in Python and dispatch before its own work.
Prints microseconds per step.
"""
from __future__ import annotations

import time

import torch


def main() -> None:
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4), torch.nn.ReLU(),
                                torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    x, y = torch.randn(2, 4), torch.tensor([0, 1])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(50):
        step()
    start = time.perf_counter()
    for _ in range(1000):
        step()
    print(f"eager W1-shaped step on 4-wide tensors: {(time.perf_counter() - start) / 1000 * 1e6:.1f} us")


if __name__ == "__main__":
    main()
