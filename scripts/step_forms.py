"""W2's training step in the forms users write it, timed side by side on lazyxla.

    python scripts/step_forms.py [--size proxy] [--steps 100] [--rounds 2] [--forms lazy,loop,whole_ca]

Forms: `lazy` (no torch.compile), `loop` (the loss and `opt.step` compiled, the README's
recommended training form), `whole` (zero_grad, forward, backward and step in one compiled
function: dynamo breaks the graph at backward) and `whole_ca` (the same under torch's
compiled autograd, which traces the backward). Each form runs in a child process of its
own (dynamo's configuration is process-wide), the forms alternating over `--rounds`; each
prints its losses over the first four steps, the mean ms of `--steps` pipelined steps
(`lx.sync()` a step, one wait at the end) for three blocks, and per step the counters
that say whether the step was captured.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

COUNTERS = ("TracedOps", "DynamoCompile", "StepCaptureReplay", "GraphCollect", "UncachedCompile",
            "ExecuteComputation")


def _child(form: str, size: str, steps: int) -> None:
    import torch
    import torch._dynamo.config as dynamo_config

    import lazyxla as lx
    from lazyxla import workloads as W
    from lazyxla.bench.plan import GPT_SIZES

    overrides, batch = GPT_SIZES[size]
    model, x, y, opt, loss_of = W.gpt_training(W.GPTConfig(**(overrides or {})), batch, lx.device())
    loss_fn, opt_step = loss_of, opt.step
    if form == "loop":
        loss_fn = torch.compile(loss_of, backend="lazyxla")
        opt_step = torch.compile(opt.step, backend="lazyxla")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, y)
        loss.backward()
        opt_step()
        return loss.detach()
    if form in ("whole", "whole_ca"):
        dynamo_config.compiled_autograd = form == "whole_ca"
        step = torch.compile(step, backend="lazyxla")
    start = time.perf_counter()
    losses = []
    for _ in range(4):
        loss = step()
        lx.sync()
        losses.append(round(loss.item(), 6))
    first = time.perf_counter() - start
    lx.metrics.clear_all()
    blocks = []
    for _ in range(3):
        lx.sync(wait=True)
        start = time.perf_counter()
        for _ in range(steps):
            loss = step()
            lx.sync()
        lx.sync(wait=True)
        blocks.append(round((time.perf_counter() - start) / steps * 1e3, 2))
    per_step = {k: round((lx.metrics.counter_value(k) or 0) / (3 * steps), 2) for k in COUNTERS}
    print(f"{form}: first 4 steps {first:.1f} s, step ms {blocks}, losses {losses}, per step {per_step}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="proxy")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--forms", default="lazy,loop,whole_ca")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        _child(opts.child, opts.size, opts.steps)
        return
    for _ in range(opts.rounds):
        for form in opts.forms.split(","):
            subprocess.run([sys.executable, __file__, "--child", form, "--size", opts.size,
                            "--steps", str(opts.steps)], check=True)


if __name__ == "__main__":
    main()
