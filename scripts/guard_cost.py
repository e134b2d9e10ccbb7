"""What dynamo's guards cost a compiled call over many lazy tensors, with and without
lazyxla's `dynamo_plain_tensor_guards` patch (lazyxla/patches).

    python scripts/guard_cost.py [--tensors 265]

Compiles a function of a list of lazy tensors (a compiled AdamW step takes 265), then times
its guard check alone (`guard_manager.check` of its cache entry; best of 200) with the patch
applied and undone, each in a process of its own (a patch changes how guards are built).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time


def _child(tensors: int, patched: bool) -> None:
    import torch
    import torch._dynamo   # registers the backend; the patch is applied now
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    import lazyxla as lx
    from lazyxla import patches
    if not patched:
        patches.undo("dynamo_plain_tensor_guards")
    dev = lx.device()
    ts = [torch.randn(8).to(dev) for _ in range(tensors)]

    def fn(ts):
        for t in ts:
            t.add_(1.0)
    torch.compile(fn, backend="lazyxla")(ts)
    lx.sync()
    guards = _debug_get_cache_entry_list(fn.__code__)[0].guard_manager
    best = float("inf")
    for _ in range(200):
        start = time.perf_counter()
        assert guards.check({"ts": ts})
        best = min(best, time.perf_counter() - start)
    print(f"patch {'applied' if patched else 'undone '}: guard check of {tensors} lazy tensors "
          f"{best * 1e6:.1f} us ({best * 1e6 / tensors:.2f} us a tensor)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=265)
    parser.add_argument("--child", choices=("applied", "undone"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        _child(opts.tensors, opts.child == "applied")
        return
    for _ in range(2):
        for mode in ("undone", "applied"):
            subprocess.run([sys.executable, __file__, "--child", mode, "--tensors", str(opts.tensors)], check=True)


if __name__ == "__main__":
    main()
