"""What calling one compiled XLA executable costs the host, per argument.

    python scripts/call_cost.py [--args 200,2000] [--calls 50]

Compiles `f(*xs) = tuple(x + 1 for x in xs)` over N small float32 arrays, every argument
donated (as a training step donates its parameters), and times the call alone (launch, not
the device's work: nothing waits) three ways: `jax.stages.Compiled.__call__` (JAX's C++
dispatch once its first call has run), the same through `jax.jit`'s own call, and how
many calls took JAX's Python path (`Compiled.call`). Prints µs per call and per argument.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from jax._src import stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--args", default="200,2000")
    parser.add_argument("--calls", type=int, default=50)
    opts = parser.parse_args()
    slow = [0]
    python_path = stages.Compiled.call

    def counted(*a, **k):
        slow[0] += 1
        return python_path(*a, **k)
    stages.Compiled.call = staticmethod(counted)
    print(f"JAX {jax.__version__} on {jax.default_backend()}")
    for n in map(int, opts.args.split(",")):
        def f(*xs):
            return tuple(x + 1 for x in xs)
        args = [jnp.full((8,), i, jnp.float32) for i in range(n)]
        jitted = jax.jit(f, donate_argnums=tuple(range(n)), keep_unused=True)
        compiled = jitted.lower(*args).compile()
        for name, call in (("Compiled.__call__", compiled), ("jax.jit call", jitted)):
            slow[0] = 0
            times = []
            for i in range(opts.calls):
                start = time.perf_counter()
                args = list(call(*args))
                times.append(time.perf_counter() - start)
            jax.block_until_ready(args)
            best = sorted(times[5:])[len(times[5:]) // 2]
            print(f"{n:5d} args  {name:18s} median {best * 1e6:8.0f} us/call  {best / n * 1e6:6.2f} us/arg  "
                  f"python-path calls {slow[0]}/{opts.calls}")


if __name__ == "__main__":
    main()
