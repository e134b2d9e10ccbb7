"""W1/W2 training, W3 donate and W4 trace, written once for every PyTorch-based
system (lazyxla, eager, PyTorch/XLA); the system comes in as a `TorchBackend`."""
from __future__ import annotations

import contextlib
import time

from . import measure as M
from .flops import model_flops_per_step
from .plan import AMP_DTYPES, HF_WORKLOADS, TRAINING
from .torch_backend import make_workload

STEADY_KEYS = ("compiles", "cached_compiles", "graphs", "traced_ops", "fallbacks")


def _steady(per_step: list[dict]) -> dict:
    """Mean per step of each counter over the measured steps."""
    out = {f"{k}_per_step": M.mean([c.get(k) for c in per_step]) if per_step and any(k in c for c in per_step)
           else None for k in STEADY_KEYS}
    ops = sorted({op for c in per_step for op in c.get("fallback_ops", ())})
    out["fallback_ops"] = ops
    return out


def _autocast(backend, cell):
    """The forward pass's precision context: torch.autocast on the system's device for
    an --amp cell (parameters, gradients and optimizer stay float32), else nothing."""
    if cell.amp is None:
        return contextlib.nullcontext()
    torch = backend.torch
    return torch.autocast(backend.device.type, dtype=getattr(torch, AMP_DTYPES[cell.amp]))


def _forward_backward(backend, cell, model, loss_of):
    """fb(x, y) -> the loss with its backward pass done, as one training step needs it;
    `loss_of(x, y)` is the (maybe compiled) model's loss on one batch."""
    def plain(x, y):
        with _autocast(backend, cell):
            loss = loss_of(x, y)
        loss.backward()
        return loss

    if cell.workload != "accum":
        return plain
    if cell.variant == "api":
        return lambda xs, ys: backend.gradient_accumulation(loss_of, [xs, ys], model)

    def python_loop(xs, ys):   # what users write without the API
        total = 0.0
        for x, y in zip(xs, ys):
            loss = loss_of(x, y) / xs.shape[0]
            loss.backward()
            total = total + loss.detach()
        return total
    return python_loop


def train(backend, cell, settings) -> dict:
    """W1 mlp / W2 gpt / W5 accum: `warmup` then `steps` full training steps, each
    ended by the system's step barrier and timed until the device finished (`step_ms`),
    then `steps` more pipelined (`_pipelined`, the headline). W5's batch is split into
    `accum_micro` micro-batches along a new leading dimension."""
    wl = make_workload(backend.workloads(), cell.workload, settings)
    flops = model_flops_per_step(wl.model, wl.inputs)
    dev = backend.device
    model = backend.place_model(wl.model.to(dev))
    x, y = wl.inputs, wl.targets
    if cell.workload == "accum":
        x, y = (t.view(settings.accum_micro, -1, *t.shape[1:]) for t in (x, y))
    x, y = backend.place_batch(x.to(dev)), backend.place_batch(y.to(dev))
    opt = wl.optimizer(model.parameters(), foreach=backend.foreach)
    model_fn, loss_fn, step_fn = backend.compile(model), backend.compile(wl.loss), backend.compile(opt.step)
    forward_backward = _forward_backward(backend, cell, model, lambda x, y: loss_fn(model_fn, x, y))
    backend.mark_step()
    backend.wait()
    rec = {"rss_base_mb": round(M.rss_mb(), 1), "optimizer": type(opt).__name__,
           "foreach": backend.foreach, "amp": cell.amp, "model_flops_per_step": flops,
           "n_params": sum(p.numel() for p in model.parameters())}
    losses, step_s, trace_s, per_step, warmup_peak = [], [], [], [], 0.0
    first, warmup_s, warmup_compiles, faults = {}, [], [], []
    warmup, steps = (settings.hf_warmup, settings.hf_steps) if cell.workload in HF_WORKLOADS else \
        (settings.warmup, settings.steps)
    for i in range(warmup + steps):
        if i == warmup:
            warmup_peak = M.peak_rss_mb()   # setup, first step (compile) and warm-up
            M.reset_peak()
        backend.begin_step()
        faults_before = M.minor_faults()
        with _timeline(backend, settings.phases and i == 0) as first_timeline:
            t0 = M.now()
            loss = _one_step(opt, forward_backward, step_fn, x, y)
            backend.mark_step()
            t1 = M.now()
            backend.wait()
            t2 = M.now()
        step_faults = M.minor_faults() - faults_before
        counters = backend.step_counters()
        losses.append(float(loss.item()))   # host read, outside the timing
        if i == 0:
            first = {"first_step_s": round(t2 - t0, 4),
                     "first_trace_s": round(t1 - t0, 4) if backend.lazy else None,
                     "first_step_counters": counters}
            if first_timeline is not None:
                first["first_step_phases"] = per_step_phases(first_timeline.summary(), 1)
        if i < warmup:
            warmup_s.append(t2 - t0)
            warmup_compiles.append(counters.get("compiles"))
        else:
            step_s.append(t2 - t0)
            trace_s.append(t1 - t0)
            per_step.append(counters)
            faults.append(step_faults)
    rec.update(first)
    rec.update({"warmup_s": round(sum(warmup_s), 4),
                "warmup_compiles": sum(warmup_compiles) if None not in warmup_compiles else None})
    rec.update({"step_ms": M.summary(step_s),
                "trace_ms": M.summary(trace_s) if backend.lazy else None,
                "steady_peak_rss_mb": round(M.peak_rss_mb(), 1),
                "peak_rss_mb": round(max(warmup_peak, M.peak_rss_mb()), 1),
                "minor_faults_per_step": M.counts(faults),   # host-dependent: a figure, never a test
                "losses": losses, **_steady(per_step)})
    one_step = lambda: _one_step(opt, forward_backward, step_fn, x, y)   # noqa: E731
    rec.update(_pipelined(backend, one_step, steps))
    if settings.phases and backend.host_timeline is not None:
        rec["phases"] = _phases(backend, one_step, steps)
    rec.update(backend.final_info())
    return rec


@contextlib.contextmanager
def _timeline(backend, on: bool):
    """The system's host timeline recording around the block when `on` and it has one, else None."""
    if not on or backend.host_timeline is None:
        yield None
        return
    with backend.host_timeline() as recording:
        yield recording


def per_step_phases(summary: dict, steps: int) -> dict:
    """lx.debug.host_timeline's summary as {phase: {"count", "ms"}} per step, the device's
    graphs ("device:graph <key>") added up as one phase "device"."""
    out: dict = {}
    for name, v in summary.items():
        entry = out.setdefault("device" if name.startswith("device:") else name, {"count": 0, "ms": 0.0})
        entry["count"] += v["count"]
        entry["ms"] += v["total_ms"]
    return {k: {"count": round(v["count"] / steps, 3), "ms": round(v["ms"] / steps, 4)} for k, v in out.items()}


def _phases(backend, step, steps: int) -> dict:
    """--phases: `steps` more pipelined steps (as `_pipelined` runs them) recorded on the host
    timeline, and their phases per step; apart from the timed blocks, which it would slow.
    The timeline's `trace` starts at a sync's end, so one step more runs first, and an event
    counts if it ends after that step (the next step's trace does), a graph on the device if
    it was launched after it."""
    with backend.host_timeline() as recording:
        step()
        backend.mark_step()
        since = time.perf_counter_ns()
        for _ in range(steps):
            step()
            backend.mark_step()
        backend.wait()
    recording.events = [e for e in recording.events if (e[2] if e[1] == "device" else e[3]) > since]
    return per_step_phases(recording.summary(), steps)


def _one_step(opt, forward_backward, step_fn, x, y):
    """One training step as a user's loop runs it; the loss stays on the device."""
    opt.zero_grad(set_to_none=True)
    loss = forward_backward(x, y)
    step_fn()
    return loss.detach()


def _pipelined(backend, step, steps: int) -> dict:
    """`steps` steps with no wait between them and one wait at the end, as training loops
    run (the Trainer reads its loss at logging steps only): the headline step time. While
    the device runs step k the host traces step k+1, so a step costs max(host, device),
    where waiting every step costs host + device. `pipelined_host_ms` is the host's share:
    until the last step barrier returned. Counters are over the block's steps, per step
    (lazyxla's `device_waits`: 0 unless something in the step waits for the device)."""
    backend.begin_step()
    t0 = M.now()
    losses = [None] * steps
    for i in range(steps):
        losses[i] = step()
        backend.mark_step()
    t1 = M.now()
    counters = backend.step_counters()   # before the wait, which is the bench's own
    backend.wait()
    t2 = M.now()
    return {"pipelined_ms": M.ms((t2 - t0) / steps), "pipelined_host_ms": M.ms((t1 - t0) / steps),
            "pipelined_counters": {k: v / steps for k, v in counters.items() if type(v) in (int, float)},
            "pipelined_losses": [float(loss.item()) for loss in losses]}   # read after the timing


def donate(backend, cell, settings) -> dict:
    """W3: a `donate_mb` float32 tensor materialised on the device, then
    `donate_iters` times `w.mul_(0.5); w.add_(1.0)` and a step barrier. The peak
    RSS is measured from the moment `w` is materialised."""
    torch = backend.torch
    if not cell.aliasing:
        backend.set_aliasing(False)
    n = settings.donate_mb * M.MB // 4
    w = torch.ones(n, device=backend.device)
    backend.mark_step()
    backend.wait()
    rss_after = M.rss_mb()
    M.reset_peak()
    iter_s, per_step = [], []
    for i in range(settings.donate_iters):
        backend.begin_step()
        t0 = M.now()
        w.mul_(0.5)
        w.add_(1.0)
        backend.mark_step()
        backend.wait()
        iter_s.append(M.now() - t0)
        per_step.append(backend.step_counters())
    peak = M.peak_rss_mb()
    info = backend.final_info()   # before the value check below runs graphs of its own
    expected = 2.0 - 0.5 ** settings.donate_iters
    got = float(w[:1].cpu().item())
    rec = {"tensor_mb": settings.donate_mb, "aliasing": cell.aliasing, "rss_after_materialise_mb": round(rss_after, 1),
           "peak_rss_mb_during": round(peak, 1), "peak_delta_mb": round(peak - rss_after, 1),
           "first_step_s": round(iter_s[0], 4), "step_ms": M.summary(iter_s[1:]),
           "value_ok": abs(got - expected) < 1e-6, "value": got, **_steady(per_step[1:]), **info}
    return rec


def _op_chain(torch):
    # cheap ops only (x -> -0.5x - 1.25 per cycle: stays bounded), so the step
    # measures per-op overhead rather than kernels; the same chain as jax_limit._CHAIN
    return (lambda t: t * 0.5, lambda t: t + 1.0, torch.neg, lambda t: t - 0.25)


def trace(backend, cell, settings) -> dict:
    """W4: `trace_ops` chained elementwise ops on a small tensor, then the step
    barrier: how long recording (or, eagerly, running) one op takes, and the sync."""
    torch = backend.torch
    chain = _op_chain(torch)
    n = settings.trace_ops
    x = torch.randn(*settings.trace_shape, generator=torch.Generator().manual_seed(0)).to(backend.device)
    backend.mark_step()
    backend.wait()
    trace_s, sync_s, step_s, per_step, first = [], [], [], [], {}
    for i in range(settings.warmup + settings.steps):
        backend.begin_step()
        t0 = M.now()
        y = x
        for k in range(n):
            y = chain[k % 4](y)
        t1 = M.now()
        backend.mark_step()
        backend.wait()
        t2 = M.now()
        counters = backend.step_counters()
        if i == 0:   # round 1: the process's first ops, with every first-time cost in them
            first = {"first_step_s": round(t2 - t0, 4), "first_trace_us_per_op": round((t1 - t0) / n * 1e6, 3),
                     "first_step_counters": counters}
        if i >= settings.warmup:
            trace_s.append(t1 - t0)
            sync_s.append(t2 - t1)
            step_s.append(t2 - t0)
            per_step.append(counters)
    info = backend.final_info()   # before reading the result runs a graph of its own
    result = float(y.flatten()[0].cpu().item())
    per_op = [t / n for t in trace_s]
    rec = {"ops": n, "shape": list(settings.trace_shape), **first,
           "trace_us_per_op": {k: (None if v is None else round(v * 1e3, 3)) for k, v in M.summary(per_op).items()},
           "trace_ms": M.summary(trace_s), "sync_ms": M.summary(sync_s), "step_ms": M.summary(step_s),
           "result": result, **_steady(per_step), **info}
    return rec


RUNNERS = {**dict.fromkeys(TRAINING, train), "donate": donate, "trace": trace}
