"""Host CPU of lazy mode's step barriers on one W2 training step, by stage.

    python scripts/sync_host.py [--size proxy|reference|gpt2] [--steps 40] [--calls]
    python scripts/sync_host.py --compiled [--size quick,proxy] [--steps 40]

Trains W2's GPT (lazyxla/workloads.py) as the bench's loop does (zero_grad, forward,
backward, foreach AdamW's `step()` with its implied barrier, then `lx.sync()`) and prints,
per step, the thread CPU time of the barriers (sync/api.py `_barrier`) and of their stages:
collect, plan, key and cache, execute (the launch, donors marked), install, the backend's
after-barrier work (the collector, the heap check), each the mean and median over the steps
(the collector does not collect at every barrier). Thread CPU,
not wall time: on a machine shared with other work it moves far less. `--calls` counts the
Python-level calls (sys.setprofile) and bytecodes (sys.settrace) the barriers run per step
instead, figures a loaded machine does not move. The stages are timed
by wrapping the functions that run them, so the stage figures include that wrapping (about
a microsecond each). Run two checkouts alternately to compare them (docs/benchmarks.md).

`--compiled` times a compiled step instead (model, loss and `opt.step` under
`torch.compile(backend="lazyxla")`), whose implied barrier replays the captured step
(sync/step_capture.py): the pass that builds its fingerprint, the executable's call (JAX's own
call apart), the donated marks, the install; and, outside the barrier, the compiled calls'
CALL insertion and argument check, and the whole step. With several sizes (`--size
quick,proxy`: one and four layers) it fits the captured barrier's thread CPU, with and without
JAX's call, to "a fixed part + a part per array" (the executable's arguments plus its
outputs), the form of issue 51's bar (1 ms + 2 us per array).
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
from lazyxla.capture import function
from lazyxla.dynamo import replay
from lazyxla.runtime import execute
from lazyxla.sync import api, pipeline, step_capture

_STAGES = ("collect_stage", "plan_stage", "compile_stage", "execute_stage", "install_stage")
# a captured step's stages: (module, function, label)
_REPLAY_STAGES = ((step_capture, "begin", "pass (fingerprint)"), (pipeline, "replay_stage", "replay"),
                  (step_capture, "execute_params", "replay: execute"),
                  (execute, "mark_all_donated", "replay: execute: donated marks"),
                  (step_capture, "install_outputs", "replay: install"),
                  # outside the barrier: the compiled calls' CALL insertion, and their argument check
                  (function, "insert_call", "calls: CALL nodes and outputs"),
                  (replay, "_signature", "calls: argument signatures"))


def _thread_clock_tick_ns() -> int:
    """The smallest step the thread CPU clock moves by here (a few ns on most kernels; some
    sandboxes count it in scheduler ticks of milliseconds, as the TPU machine does)."""
    start = time.thread_time_ns()
    while (now := time.thread_time_ns()) == start:
        pass
    return now - start


# Thread CPU where it resolves a stage (microseconds); else wall time, which a shared machine
# disturbs more but which resolves them: the report says which clock it used.
_CLOCK_NAME = "thread CPU" if _thread_clock_tick_ns() < 10_000 else "wall"
_clock = time.thread_time_ns if _CLOCK_NAME == "thread CPU" else time.perf_counter_ns


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


def _print_stages(steps: list) -> None:
    labels = ["barriers"] + sorted({k for s in steps for k in s} - {"barriers"})
    print(f"  {_CLOCK_NAME + ' ms a step':<34} {'mean':>7} {'median':>7} {'min':>7}")
    for label in labels:
        per_step = [s[label] / 1e6 for s in steps]
        print(f"  {label:<34} {statistics.mean(per_step):7.3f} {statistics.median(per_step):7.3f} "
              f"{min(per_step):7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="proxy", help=f"one of {sorted(GPT_SIZES)}; with --compiled, "
                                                         "a comma-separated list")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--calls", action="store_true", help="count Python calls and bytecodes instead of timing")
    parser.add_argument("--compiled", action="store_true", help="a compiled step, its barrier replayed")
    opts = parser.parse_args()
    sizes = opts.size.split(",")
    for size in sizes:
        if size not in GPT_SIZES:
            parser.error(f"unknown size {size!r}")
    if opts.compiled:
        compiled(sizes, opts.steps, opts.calls)
    elif len(sizes) > 1:
        parser.error("several sizes need --compiled")
    else:
        lazy(sizes[0], opts.steps, opts.calls)


class _Counted:
    """Python calls (functions, a generator's resumption too, and C functions) and bytecodes
    executed in the wrapped functions, while `on`: what the host work is made of, the same
    on a loaded machine."""

    def __init__(self) -> None:
        self.on = False
        self.calls = self.opcodes = 0

    def wrap(self, owner, name: str) -> None:
        fn = getattr(owner, name)

        def counted(*args, **kwargs):
            if not self.on:
                return fn(*args, **kwargs)
            sys.setprofile(self._profile)
            sys.settrace(self._trace)
            try:
                return fn(*args, **kwargs)
            finally:
                sys.settrace(None)
                sys.setprofile(None)
        setattr(owner, name, counted)

    def _profile(self, frame, event: str, arg) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1

    def _trace(self, frame, event: str, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.opcodes += 1
        return self._trace

    def report(self, steps: int) -> None:
        print(f"  in the barriers, a step: {self.calls / steps:,.0f} Python calls, {self.opcodes / steps:,.0f} bytecodes")


def _instruments(count_calls: bool, stages) -> tuple:
    """(timed, counted): the barriers wrapped to count their Python calls (`count_calls`), or
    timed with their `stages` ((owner, function, label) each)."""
    timed, counted = _Timed(), _Counted()
    if count_calls:
        counted.wrap(api, "_barrier")
    else:
        timed.wrap(api, "_barrier", "barriers")
        for owner, name, label in stages:
            timed.wrap(owner, name, label)
    return timed, counted


def _measure(step, steps: int, timed: "_Timed", counted: "_Counted", names: tuple) -> dict:
    """`steps` steps with the instruments on, after the warm-up; the counters `names` per step."""
    lx.metrics.clear_all()
    counted.calls = counted.opcodes = 0
    timed.on = counted.on = True
    for _ in range(steps):
        step()
    timed.on = counted.on = False
    lx.wait_device_ops()
    return {name: (lx.metrics.counter_value(name) or 0) / steps for name in names}


def _warm_up(step) -> None:
    for _ in range(5):
        step()
    lx.wait_device_ops()


def lazy(size: str, steps: int, count_calls: bool) -> None:
    model, opt, x, y = _model(size)
    stages = [(pipeline, name, name.removesuffix("_stage")) for name in _STAGES]
    timed, counted = _instruments(count_calls, stages + [
        (backend.current(), "after_barrier", "after barrier (collector, heap)")])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        lx.sync()
        timed.end_step()

    _warm_up(step)
    counters = _measure(step, steps, timed, counted,
                        ("TracedOps", "GraphCollect", "DonorPlan", "DonorPlanReused", "OutputPlanBuilt",
                         "CachedCompile", "GcCollections"))
    print(f"W2 {size}, {steps} steps (lazyxla on {lx.platform()}); per step: {counters}")
    if count_calls:
        counted.report(steps)
        return
    _print_stages(timed.steps)


def _loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def compiled(sizes: list, steps: int, count_calls: bool) -> None:
    """The compiled step of each size (module docstring): its barrier by stage, then the fit
    (`count_calls`: its Python calls and bytecodes instead)."""
    timed, counted = _instruments(count_calls, _REPLAY_STAGES)
    points = []
    for size in sizes:
        model, opt, x, y = _model(size)
        forward, loss, update = (torch.compile(f, backend="lazyxla") for f in (model, _loss, opt.step))

        def step() -> None:
            start = _clock()
            opt.zero_grad(set_to_none=True)
            loss(forward, x, y).backward()
            update()
            lx.sync()
            timed.step["step: zero_grad to lx.sync() (main thread)"] += _clock() - start
            timed.end_step()

        _warm_up(step)
        captured = list(step_capture._CAPTURES.values())[-1]
        if not count_calls:
            timed.wrap(captured.exe, "call", "replay: execute: JAX's call")
        arrays = len(captured.gather) + len(captured.scalar_gather) + len(captured.exe.outputs)
        counters = _measure(step, steps, timed, counted,
                            ("StepCaptureReplay", "ExecuteComputation", "GraphCollect", "DonorPlan",
                             "GcCollections"))
        print(f"W2 {size} compiled, {steps} steps (lazyxla on {lx.platform()}); captured call of "
              f"{len(captured.gather) + len(captured.scalar_gather)} arguments and {len(captured.exe.outputs)} "
              f"outputs; per step: {counters}")
        torch._dynamo.reset()
        if count_calls:
            counted.report(steps)
            continue
        _print_stages(timed.steps)
        barrier = [s["barriers"] / 1e6 for s in timed.steps]
        own = [(s["barriers"] - s["replay: execute: JAX's call"]) / 1e6 for s in timed.steps]
        points.append((arrays, barrier, own))
        timed.steps.clear()
    if len(points) >= 2:   # the median, and the least disturbed step (min) on a shared machine
        for name, of in (("median", statistics.median), ("min", min)):
            _fit(f"captured barrier, {name} {_CLOCK_NAME}", [(n, of(t)) for n, t, _ in points])
            _fit("  the same less JAX's executable call", [(n, of(t)) for n, _, t in points])


def _fit(label: str, points: list) -> None:
    """A least-squares line through (arrays, ms), printed as "a ms + b us per array"."""
    mean_n = statistics.mean(n for n, _ in points)
    mean_t = statistics.mean(t for _, t in points)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in points) / sum((n - mean_n) ** 2 for n, _ in points)
    print(f"{label}: {mean_t - slope * mean_n:.3f} ms + {slope * 1e3:.2f} us per array "
          f"({', '.join(f'{t:.3f} ms at {n}' for n, t in points)})")


if __name__ == "__main__":
    main()
