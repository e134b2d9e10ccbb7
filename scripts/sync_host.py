"""Host CPU of lazy mode's step barriers on one W2 training step, by stage.

    python scripts/sync_host.py [--size proxy|reference|gpt2] [--steps 40] [--calls]

Trains W2's GPT (lazyxla/workloads.py) as the bench's loop does (zero_grad, forward,
backward, foreach AdamW's `step()` with its implied barrier, then `lx.sync()`) and prints,
per step, the thread CPU time of the barriers (sync/api.py `_barrier`) and of their stages:
collect, plan, key and cache, execute (the launch, donors marked), install, the backend's
after-barrier work (the collector, the heap check), each the mean and median over the steps
(the collector does not collect at every barrier). Thread CPU,
not wall time: on a machine shared with other work it moves far less. `--calls` counts the
Python-level calls (sys.setprofile) the barriers make per step instead. The stages are timed
by wrapping the functions that run them, so the stage figures include that wrapping (about
a microsecond each). Run two checkouts alternately to compare them (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time

import torch
from torch.nn import functional as F

import lazyxla as lx
from lazyxla import workloads as W
from lazyxla.bench.plan import GPT_SIZES
from lazyxla.runtime import backend
from lazyxla.sync import api, pipeline

_STAGES = ("collect_stage", "plan_stage", "compile_stage", "execute_stage", "install_stage")
_clock = time.thread_time_ns


class _Timed:
    """Thread CPU per step of the wrapped functions, while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.step: collections.Counter = collections.Counter()
        self.steps: list[collections.Counter] = []

    def wrap(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            if not self.on:
                return fn(*args, **kwargs)
            start = _clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.step[label] += _clock() - start
        setattr(owner, name, timed)

    def end_step(self) -> None:
        if self.on:
            self.steps.append(self.step)
        self.step = collections.Counter()


def _model(size: str):
    overrides, batch = GPT_SIZES[size]
    cfg = W.GPTConfig(**(overrides or {}))
    torch.manual_seed(0)
    model = W.gpt(cfg)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=torch.Generator().manual_seed(1))
    dev = lx.device()
    x, y = tokens[:, :-1].contiguous().to(dev), tokens[:, 1:].contiguous().to(dev)
    model = model.to(dev)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True), x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(GPT_SIZES), default="proxy")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--calls", action="store_true", help="count Python calls instead of timing")
    opts = parser.parse_args()
    model, opt, x, y = _model(opts.size)
    timed = _Timed()
    calls = [0]

    def count(frame, event, arg):
        if event == "call" or event == "c_call":   # Python functions (a generator's resumption too) and C ones
            calls[0] += 1

    barrier = api._barrier

    def counted(kind: str, explicit: bool) -> int:
        if not timed.on:
            return barrier(kind, explicit)
        sys.setprofile(count)
        try:
            return barrier(kind, explicit)
        finally:
            sys.setprofile(None)

    if opts.calls:
        api._barrier = counted
    else:
        timed.wrap(api, "_barrier", "barriers")
        for name in _STAGES:
            timed.wrap(pipeline, name, name.removesuffix("_stage"))
        timed.wrap(backend.current(), "after_barrier", "after barrier (collector, heap)")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        lx.sync()
        timed.end_step()

    for _ in range(5):
        step()
    lx.wait_device_ops()
    lx.metrics.clear_all()
    timed.on = True
    for _ in range(opts.steps):
        step()
    timed.on = False
    lx.wait_device_ops()
    counters = {name: (lx.metrics.counter_value(name) or 0) / opts.steps for name in
                ("TracedOps", "GraphCollect", "DonorPlan", "DonorPlanReused", "OutputPlanBuilt", "CachedCompile",
                 "GcCollections")}
    print(f"W2 {opts.size}, {opts.steps} steps (lazyxla on {lx.platform()}); per step: {counters}")
    if opts.calls:
        print(f"  Python calls in the barriers: {calls[0] / opts.steps:,.0f} a step")
        return
    labels = ["barriers"] + sorted({k for s in timed.steps for k in s} - {"barriers"})
    print(f"  {'thread CPU ms a step':<34} {'mean':>7} {'median':>7}")
    for label in labels:
        per_step = [s[label] / 1e6 for s in timed.steps]
        print(f"  {label:<34} {statistics.mean(per_step):7.3f} {statistics.median(per_step):7.3f}")


if __name__ == "__main__":
    main()
