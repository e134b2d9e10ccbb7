"""Main-thread CPU time of a steady compiled W2-proxy step, by owner (issue #44 item 6).

    python scripts/compiled_host_cost.py [--steps 40] [--warmup 5] [--timeline] [--profile]

Trains W2's proxy GPT (d 64, 4 layers, seq 32, batch 2, AdamW foreach) with the loss and
`opt.step` compiled by backend="lazyxla" and prints, per steady step, CPU time
(`time.thread_time`: other processes on the machine inflate it far less than wall time) of:
the whole step; the backward on all threads (autograd runs a lazyxla device's backward on
a thread of its own, so its process time counts, the device being idle then); lazyxla's
replays (`CompiledGraph._call` per graph, the barrier it may end with excluded); its
tracing of the ops between graphs (AccumulateGrad's 53 detaches and backward's ones_like);
the implied barrier's stages (collect, donor plan, key and cache, execute, install); and
what is left per call, which is torch's: dynamo's guards and frame handling, AOTAutograd's
runtime wrappers, the autograd engine, the optimizer's wrappers, `zero_grad`. Also the
ops traced lazily, executable calls and compiles per step. `--timeline` adds the host
timeline (wall time) of the steady steps; `--profile` prints cProfile's top functions of
the main thread's steady steps instead of the stage timers. The device's work is waited for
before each step, so it does not share the cores with the host's. Results:
docs/benchmarks.md, "Compiled mode's host cost per step".
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import contextlib
import importlib
import pstats
import statistics
import time

import torch

import lazyxla as lx
from lazyxla import workloads as W
from lazyxla.dynamo import replay
from lazyxla.frontend import tensor as lazy_tensor

STAGES = ("collect", "plan_donors", "get_or_compile", "execute", "install")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--timeline", action="store_true", help="also print lx.debug.host_timeline of the steady steps")
    opts = parser.parse_args()
    spent: dict = collections.defaultdict(float)
    api = importlib.import_module("lazyxla.sync.api")
    pipeline = importlib.import_module("lazyxla.sync.pipeline")   # where the stages' callees are named
    if not opts.profile:   # the timers would be most of what cProfile sees
        for name in STAGES:
            _time(pipeline, name, name, spent)
        _time_replays(spent)
        _time(lazy_tensor, "_dispatch", "traced ops", spent)
        _time(api, "_barrier", "barrier", spent)

    _, x, y, opt, loss_of = W.gpt_training(W.GPTConfig(d=64, heads=4, layers=4, seq=32), 2, lx.device())
    loss_of = torch.compile(loss_of, backend="lazyxla")
    step = torch.compile(opt.step, backend="lazyxla")
    rows: dict = collections.defaultdict(list)
    prof = cProfile.Profile() if opts.profile else None
    recording = contextlib.ExitStack()
    for i in range(opts.warmup + opts.steps):
        if i == opts.warmup and opts.timeline:
            record = recording.enter_context(lx.debug.host_timeline())
        lx.wait_device_ops()
        if i == opts.warmup:
            lx.metrics.clear_all()
        spent.clear()
        steady = i >= opts.warmup
        if prof and steady:
            prof.enable()
        t0 = time.thread_time()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        t1 = time.thread_time()
        b0 = time.process_time()
        loss.backward()   # runs on autograd's device thread: counted by process time
        backward = time.process_time() - b0
        t2 = time.thread_time()
        step()
        t3 = time.thread_time()
        if prof and steady:
            prof.disable()
        if steady:
            total = t3 - t0 - (t2 - t1) + backward
            rows["step (zero_grad..opt.step)"].append(total)
            rows["  forward call"].append(t1 - t0)
            rows["  backward (all threads)"].append(backward)
            rows["  opt.step call (incl. barrier)"].append(t3 - t2)
            rows["lazyxla replays (3 graphs)"].append(spent["replay"])
            for kind in ("forward", "backward", "inference"):
                rows[f"  {kind}"].append(spent[f"replay {kind}"])
            rows["torch's: forward call - its replay"].append(t1 - t0 - spent["replay forward"])
            rows["torch's: backward - its replay"].append(backward - spent["replay backward"])
            rows["  of which lazyxla's tracing (detach, ones_like)"].append(spent["traced ops"])
            rows["torch's: opt.step - replay - barrier"].append(t3 - t2 - spent["replay inference"] - spent["barrier"])
            rows["barrier"].append(spent["barrier"])
            for name in STAGES:
                rows[f"  {name}"].append(spent[name])
            rows["torch's (step - replays - barrier)"].append(total - spent["replay"] - spent["barrier"])
    lx.sync()
    lx.wait_device_ops()
    recording.close()
    n = opts.steps
    print(f"W2 proxy compiled: loss {loss.item():.6f}; per step {(lx.metrics.counter_value('TracedOps') or 0) / n:.0f} "
          f"lazily traced ops, {(lx.metrics.counter_value('ExecuteComputation') or 0) / n:.1f} executable calls, "
          f"{lx.metrics.counter_value('UncachedCompile') or 0} compiles; main-thread CPU ms per step "
          f"(median [p10, p90]) over {n} steps:")
    for name, values in rows.items():
        qs = statistics.quantiles(values, n=10)
        print(f"  {name:38s} {statistics.median(values) * 1e3:7.3f}  [{qs[0] * 1e3:6.3f}, {qs[-1] * 1e3:6.3f}]")
    if opts.timeline:
        print(f"host timeline of the {n} steady steps (wall time, mean per event):")
        print(record)
    if prof:
        stats = pstats.Stats(prof)
        stats.sort_stats("cumulative").print_stats(70)
        stats.sort_stats("tottime").print_stats(40)


def _time_replays(spent: dict) -> None:
    """Each replay's CPU time (on its own thread) under "replay" and "replay <kind>", the
    implied barrier it may end with excluded."""
    original = replay.CompiledGraph._call

    def timed(self, args):
        inner = spent["barrier"]
        start = time.thread_time()
        try:
            return original(self, args)
        finally:
            took = time.thread_time() - start - (spent["barrier"] - inner)
            spent["replay"] += took
            spent["replay " + self.name.split("_")[1]] += took
    replay.CompiledGraph._call = timed


def _time(owner, attr: str, label: str, spent: dict, exclude: tuple = ()) -> None:
    """Wrap owner.attr to add its main-thread CPU time to spent[label]; the time of the
    labels in `exclude` spent inside it is not counted (a replay that runs a barrier)."""
    original = getattr(owner, attr)

    def timed(*args, **kwargs):
        inner = sum(spent[e] for e in exclude)
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - start - (sum(spent[e] for e in exclude) - inner)
    setattr(owner, attr, timed)


if __name__ == "__main__":
    main()
