"""The least a Python `__torch_dispatch__` runtime can spend on one W2 training step's host side.

    python scripts/step_floor.py [--size proxy|reference|gpt2] [--steps 30]

Trains W2's GPT (lazyxla/workloads.py: forward, backward, foreach AdamW) three ways in one
process and prints the median step in ms: eager CPU; `Floor`, a wrapper subclass whose
`__torch_dispatch__` does only what any such runtime must (a cached shape lookup per op
and a fresh wrapper per output; in-place ops return their target), so the figure is
PyTorch's own Python dispatch, autograd and optimizer code for the step; and lazyxla's
lazy step (tracing, the implied barrier's sync, no wait for the device). lazyxla's host
time per step cannot fall below `Floor`'s without skipping the per-op dispatch itself.
Beside the wall-clock median it prints each system's host CPU time per step (the threads
that run the step's Python), which a machine shared with other work disturbs far less,
and the median time per step spent inside the optimizer's `torch._foreach_*` calls (its
whole update: torch's dispatch of each call and what the system does with it).
`--inside` also sums, per ATen op, the time spent inside each system's `__torch_dispatch__`
(outermost calls only, measured steps only) and prints the largest differences per call;
`--frames` with it counts the Python function calls made in there instead of timing them
(a figure the machine's load does not move). `--wait` makes lazyxla wait for its device
before each step, outside the timing, so that on a CPU backend the previous step's graph
does not run beside the trace.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time

import torch
from torch.nn import functional as F

import lazyxla as lx
from lazyxla import workloads as W
from lazyxla.bench.plan import GPT_SIZES

_META = torch.device("meta")


class Floor(torch.Tensor):
    """A wrapper subclass that computes nothing (module docstring)."""
    _plans: dict = {}

    @staticmethod
    def make(spec: tuple) -> "Floor":
        shape, stride, offset, dtype = spec
        t = torch.Tensor._make_wrapper_subclass(Floor, shape, strides=stride, storage_offset=offset,
                                                dtype=dtype, device=_META)
        t._spec = spec
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        key = (func, _key(args), _key(kwargs) if kwargs else None)
        plan = cls._plans.get(key)
        if plan is None:
            plan = cls._plans[key] = _plan(func, args, kwargs or {})
        return _build(plan, args)


def _key(value):
    """What the output's shape can depend on: tensor specs and the other arguments' values."""
    tp = type(value)
    if tp is Floor:
        return value._spec
    if tp is list or tp is tuple:
        return tuple(_key(v) for v in value)
    if tp is dict:
        return tuple((k, _key(v)) for k, v in value.items())
    if isinstance(value, torch.Tensor):
        return _spec_of(value)
    if tp is float:   # a learning rate or bias correction: no output's shape depends on its value
        return float
    return value


def _spec_of(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def _to_meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=_META)
    if type(value) in (list, tuple):
        return type(value)(_to_meta(v) for v in value)
    return value


def _plan(func, args, kwargs):
    """Run `func` on meta tensors once. The plan: None, an input position (an op returning its
    argument, in place), a spec for a new tensor, or a tuple/list of those."""
    margs = [_to_meta(a) for a in args]
    out = func(*margs, **{k: _to_meta(v) for k, v in kwargs.items()})
    position = {id(m): i for i, m in enumerate(margs) if isinstance(m, torch.Tensor)}

    def plan_of(o):
        if isinstance(o, torch.Tensor):
            return ("arg", position[id(o)]) if id(o) in position else ("new", _spec_of(o))
        if type(o) in (list, tuple):
            return ("seq", type(o), tuple(plan_of(x) for x in o))
        return ("const", o)
    return plan_of(out)


def _build(plan, args):
    kind = plan[0]
    if kind == "new":
        return Floor.make(plan[1])
    if kind == "arg":
        return args[plan[1]]
    if kind == "seq":
        return plan[1](_build(p, args) for p in plan[2])
    return plan[1]


@contextlib.contextmanager
def _timed_foreach(spent: list):
    """Every `torch._foreach_*` function adds its calls' time to `spent[0]` (torch.optim looks
    them up on `torch` at each call, so patching the attributes reaches the optimizer)."""
    names = [n for n in dir(torch) if n.startswith("_foreach_")]
    originals = {n: getattr(torch, n) for n in names}

    def timed(fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
        return call
    for n, fn in originals.items():
        setattr(torch, n, timed(fn))
    try:
        yield
    finally:
        for n, fn in originals.items():
            setattr(torch, n, fn)


class _Inside:
    """Inside a tensor class's `__torch_dispatch__`, per ATen op: [calls, seconds, Python
    function calls made]. Outermost calls only (a lazy handler's own ops are part of its
    op's figures); `on` is set for the measured steps. With `count_frames` each call runs
    under `sys.setprofile` (its seconds are then the profiler's, not the op's), and the
    training loop runs backward on the main thread, which `sys.setprofile` sees."""

    def __init__(self, count_frames: bool = False) -> None:
        self.by_op: dict = {}
        self.on = False
        self.count_frames = count_frames
        self._depth = threading.local()
        self._frames = 0

    def _profile(self, frame, event, arg) -> None:
        if event == "call":
            self._frames += 1

    @contextlib.contextmanager
    def wrapping(self, cls: type):
        original = cls.__dict__["__torch_dispatch__"]
        inner = original.__func__

        def timed(klass, func, types, args=(), kwargs=None):
            depth = getattr(self._depth, "n", 0)
            if depth or not self.on:
                return inner(klass, func, types, args, kwargs)
            self._depth.n = 1
            frames = self._frames
            if self.count_frames:
                sys.setprofile(self._profile)
            start = time.perf_counter()
            try:
                return inner(klass, func, types, args, kwargs)
            finally:
                spent = time.perf_counter() - start
                if self.count_frames:
                    sys.setprofile(None)
                self._depth.n = 0
                row = self.by_op.setdefault(func, [0, 0.0, 0])
                row[0] += 1
                row[1] += spent
                row[2] += self._frames - frames
        cls.__torch_dispatch__ = classmethod(timed)
        try:
            with torch.autograd.set_multithreading_enabled(not self.count_frames):
                yield self
        finally:
            cls.__torch_dispatch__ = original


def _train(device: str, size: str, steps: int, floor: bool = False, inside: "_Inside | None" = None,
           wait: bool = False) -> tuple:
    overrides, batch = GPT_SIZES[size]
    cfg = W.GPTConfig(**(overrides or {}))
    torch.manual_seed(0)
    model = W.gpt(cfg)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=torch.Generator().manual_seed(1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if floor:
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[name] = torch.nn.Parameter(Floor.make(_spec_of(p)))
                    module._parameters[name]._spec = _spec_of(p)
            for name, b in list(module._buffers.items()):
                if b is not None:
                    module._buffers[name] = Floor.make(_spec_of(b))
        x, y = Floor.make(_spec_of(x)), Floor.make(_spec_of(y))
    else:
        model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    times, foreach, spent = [], [], [0.0]
    with _timed_foreach(spent):
        for i in range(5 + steps):
            if wait and not floor and device != "cpu":
                lx.wait_device_ops()   # outside the timing: no XLA:CPU work runs beside the trace
            if i == 5:
                cpu = _host_cpu_s()
                if inside is not None:
                    inside.on = True
            start = time.perf_counter()
            spent[0] = 0.0
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
            opt.step()
            times.append(time.perf_counter() - start)
            foreach.append(spent[0])
    cpu = _host_cpu_s() - cpu
    if inside is not None:
        inside.on = False
    return statistics.median(times[5:]) * 1e3, cpu / steps * 1e3, statistics.median(foreach[5:]) * 1e3


def _host_cpu_s() -> float:
    """CPU seconds of the threads that run the step's Python: this one and autograd's device
    threads (`pt_autograd_*`, which run a lazy step's backward). XLA's own threads are left
    out, so on a machine shared with other work the figure moves far less than wall time.
    The kernel counts other threads in ticks (10 ms): meaningful over many steps only."""
    tick = os.sysconf("SC_CLK_TCK")
    total = time.thread_time()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if not f.read().startswith("pt_autograd"):
                    continue
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:   # the thread ended
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(GPT_SIZES), default="proxy")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--systems", default="eager,floor,lazyxla",
                        help="comma-separated: eager (CPU), floor (the Floor subclass), lazyxla (lazy mode)")
    parser.add_argument("--inside", action="store_true",
                        help="also time inside __torch_dispatch__ per ATen op (floor and lazyxla)")
    parser.add_argument("--wait", action="store_true",
                        help="lazyxla waits for its device before each step, outside the timing (on a CPU "
                             "backend the previous step's graph then does not run beside the trace)")
    parser.add_argument("--frames", action="store_true",
                        help="with --inside: count the Python function calls inside __torch_dispatch__ "
                             "(sys.setprofile; backward on the main thread; the times are then the profiler's)")
    parser.add_argument("--top", type=int, default=15, help="ops listed by --inside")
    opts = parser.parse_args()
    from lazyxla.frontend.tensor import LazyTensor
    classes = {"floor": Floor, "lazyxla": LazyTensor}
    insides = {name: _Inside(opts.frames) for name in classes} if opts.inside else {}
    runs = {"eager": ("eager CPU", lambda: _train("cpu", opts.size, opts.steps)),
            "floor": ("Floor subclass", lambda: _train("meta", opts.size, opts.steps, floor=True,
                                                       inside=insides.get("floor"))),
            "lazyxla": ("lazyxla lazy", lambda: _train(str(lx.device()), opts.size, opts.steps,
                                                       inside=insides.get("lazyxla"), wait=opts.wait))}
    systems = opts.systems.split(",")
    unknown = sorted(set(systems) - set(runs))
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {sorted(runs)}")
    print(f"W2 {opts.size} step, host only, median of {opts.steps} (lazyxla on {lx.platform()}); "
          "host CPU: the Python threads' CPU time per step (see _host_cpu_s):")
    for name in systems:
        label, train = runs[name]
        with insides[name].wrapping(classes[name]) if name in insides else contextlib.nullcontext():
            wall, cpu, foreach = train()
        print(f"  {label:<20} {wall:8.2f} ms   host CPU {cpu:8.2f} ms   foreach calls {foreach:6.2f} ms")
    if insides:
        _print_inside({n: i.by_op for n, i in insides.items() if n in systems}, opts.steps, opts.top)


def _print_inside(by_system: dict, steps: int, top: int) -> None:
    """Calls, ms and Python function calls per step inside `__torch_dispatch__`, and per op
    us (or Python calls) a call, largest lazy excess over the floor first."""
    for name, by_op in by_system.items():
        calls, spent, frames = (sum(row[i] for row in by_op.values()) for i in range(3))
        print(f"inside __torch_dispatch__, {name}: {calls / steps:.0f} calls, {spent / steps * 1e3:.2f} ms, "
              f"{frames / steps:.0f} Python calls a step")
    floor, lazy = by_system.get("floor"), by_system.get("lazyxla")
    if floor is None or lazy is None:
        return
    rows = []
    for func, (calls, total, frames) in lazy.items():
        fcalls, ftotal, fframes = floor.get(func, (0, 0.0, 0))
        f_us = ftotal / fcalls * 1e6 if fcalls else float("nan")
        f_frames = fframes / fcalls if fcalls else float("nan")
        rows.append((total - ftotal, str(func), calls / steps, f_us, total / calls * 1e6, f_frames, frames / calls))
    print(f"  {'op':<40} {'calls':>6} {'floor us':>9} {'lazy us':>8} {'ratio':>6} {'Python calls floor/lazy':>24}")
    for excess, func, calls, f_us, l_us, f_frames, l_frames in sorted(rows, reverse=True)[:top]:
        print(f"  {func:<40} {calls:6.0f} {f_us:9.2f} {l_us:8.2f} {l_us / f_us:6.2f}x {f_frames:15.1f} / {l_frames:.1f}")


if __name__ == "__main__":
    main()
