"""W2 (the reference GPT, 4 blocks) with and without torch.utils.checkpoint around each
block: the step graph's XLA temporaries (lx.debug.donation_report().memory), the peak of
device memory and the losses, which must agree.

    python scripts/checkpoint_memory.py [--steps 3]
"""
from __future__ import annotations

import argparse
import dataclasses


def run(checkpoint: bool, steps: int) -> dict:
    import torch
    import lazyxla as lx
    from lazyxla import workloads

    wl = workloads.make("gpt")
    wl.model.cfg = dataclasses.replace(wl.model.cfg, checkpoint=checkpoint)
    dev = lx.device()
    model = wl.model.to(dev)
    opt = wl.optimizer(model.parameters(), foreach=True)
    inputs, targets = wl.inputs.to(dev), wl.targets.to(dev)
    torch.lazyxla.reset_peak_memory_stats()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = wl.loss(model, inputs, targets)
        loss.backward()
        opt.step()
        lx.sync()
        losses.append(loss)
    mem = lx.debug.donation_report().memory
    return {"losses": [round(float(v.item()), 5) for v in losses],
            "temporaries_mb": mem["temp_size_in_bytes"] / 2**20,
            "peak_mb": torch.lazyxla.max_memory_allocated() / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    plain, ckpt = run(False, args.steps), run(True, args.steps)
    print("| W2 step | temporaries | device peak | losses |\n|---|---|---|---|")
    for name, r in (("plain", plain), ("checkpoint per block", ckpt)):
        print(f"| {name} | {r['temporaries_mb']:.1f} MB | {r['peak_mb']:.1f} MB | {r['losses']} |")
    print(f"temporaries ratio {ckpt['temporaries_mb'] / plain['temporaries_mb']:.2f}; "
          f"losses equal: {plain['losses'] == ckpt['losses']}")


if __name__ == "__main__":
    main()
