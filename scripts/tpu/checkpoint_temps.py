"""Why activation checkpointing did not shrink the step's temporaries on the TPU
(tests/test_checkpoint.py `test_six_blocks_step_temporaries_shrink`, 2026-12-07: 5.58 MB
checkpointed against 5.48 MB plain there; about 0.5x on XLA:CPU).

    python scripts/tpu/checkpoint_temps.py [--widths 256,1024] [--batch 512]

Per width and mode (plain, reentrant, non-reentrant checkpoint around each of six
residual MLP blocks): XLA's temporaries of the step graph, the products in the optimized
HLO (a kept recompute has more than the plain step's: 6 forward, 12 backward) and the
optimization barriers in the HLO lazyxla hands XLA. Runs on any backend; compare the chip
with the CPU.
"""
from __future__ import annotations

import argparse
import re

import torch
import torch.utils.checkpoint as tuc

import lazyxla as lx
from lazyxla.compile import cache


def _blocks(n: int, d: int) -> torch.nn.ModuleList:
    torch.manual_seed(0)
    return torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        for _ in range(n))


def measure(width: int, batch: int, reentrant) -> dict:
    dev = lx.device()
    blocks = _blocks(6, width).to(dev)
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    x = torch.randn(batch, width).to(dev).requires_grad_(reentrant is True)
    barriers = 0
    for step in range(2):
        opt.zero_grad()
        h = x
        for b in blocks:
            h = h + (b(h) if reentrant is None else tuc.checkpoint(b, h, use_reentrant=reentrant))
        h.pow(2).mean().backward()
        if step == 1:
            barriers = lx.debug.hlo_text().count("opt-barrier")
        opt.step()
        lx.sync()
    exe = next(reversed(cache._cache.values()))   # the step graph: the last one compiled or hit
    optimized = exe.compiled.as_text()
    return {"temporaries_mb": lx.debug.donation_report().memory["temp_size_in_bytes"] / 2**20,
            "products": len(re.findall(r"= \S+ (?:dot|convolution)\(", optimized))
            + len(re.findall(r"custom_call_target=\"__onednn\$matmul", optimized)),
            "fusions": optimized.count(" fusion("), "opt_barriers_in": barriers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="256,1024")
    parser.add_argument("--batch", type=int, default=512)
    opts = parser.parse_args()
    print(f"platform {lx.platform()}, six blocks, batch {opts.batch}")
    for width in (int(w) for w in opts.widths.split(",")):
        for name, mode in (("plain", None), ("reentrant", True), ("non-reentrant", False)):
            print(f"width {width:5d} {name:>14}: {measure(width, opts.batch, mode)}", flush=True)


if __name__ == "__main__":
    main()
