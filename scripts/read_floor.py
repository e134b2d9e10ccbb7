"""The least a decoding token costs on lazyxla: one host read of a small device graph.

    python scripts/read_floor.py [--tokens 200]

Each "token" does what generate()'s stopping check needs at the least: one op on a
device-resident [2, 128] float tensor that stays pending, then a host read of a
reduction of it (`(x.max() > 1e9).item()`), so every token runs one cached executable
and downloads one value. Prints microseconds per token for eager CPU and lazyxla
(after a warm-up that compiles). A model step and generate()'s own bookkeeping come
on top of this.
"""
from __future__ import annotations

import argparse
import time

import torch

import lazyxla as lx


def per_token_us(x: torch.Tensor, tokens: int) -> float:
    for _ in range(5):   # warm-up: the executable compiles once
        x = x * 0.5 + 1.0
        bool((x.max() > 1e9).item())
    start = time.perf_counter()
    for _ in range(tokens):
        x = x * 0.5 + 1.0
        bool((x.max() > 1e9).item())
    return (time.perf_counter() - start) / tokens * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=200)
    args = ap.parse_args()
    x = torch.randn(2, 128)
    print(f"eager CPU {per_token_us(x, args.tokens):8.1f} us/token")
    print(f"lazyxla   {per_token_us(x.to(lx.device()), args.tokens):8.1f} us/token")


if __name__ == "__main__":
    main()
