"""The captured step against the ordinary barrier, in one process (equal load for both).

    python scripts/step_capture_ab.py train [gpt|mlp]   # W2 proxy / W1, compiled loss + AdamW step
    python scripts/step_capture_ab.py decode            # tiny Llama, the bench's decode loop form
    python scripts/step_capture_ab.py generate [llama|gpt2] [batch]   # generate(), compiled forward

Alternates `LAZYXLA_STEP_CAPTURE` (through `config.override`) step by step (train) or call
by call (decode). train: main-thread CPU time of the step barrier (`sync.api._barrier`) and of
the step until `lx.sync()` returns, medians, the device waited for before each step; the
captured step's argument and output counts. decode: decode tokens/s of the loop form with the
forward compiled and with the whole step compiled, and whether both modes give the same tokens.
generate: Hugging Face generate() with `torch.compile(model.forward)` and a static cache (its
tokens end in a host read, sync/read_capture.py): decode tokens/s (a call less a one-token
call's time) and main-thread CPU ms per decode token, medians, and whether the tokens agree.
Results: docs/benchmarks.md, "A captured step (issue 51)".
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

import lazyxla as lx
from lazyxla import config, workloads
from lazyxla.sync import api, step_capture

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lazyxla", "bench"))


def _summary(values: list) -> str:
    q = statistics.quantiles(values, n=10)
    return f"{statistics.median(values) * 1e3:.3f} ms [p10 {q[0] * 1e3:.3f}, p90 {q[-1] * 1e3:.3f}]"


def make_step(name: str):
    """The reference workload compiled on the device: one training step up to (not
    including) `lx.sync()`, returning its loss."""
    wl = workloads.make(name)
    dev = lx.device()
    model = wl.model.to(dev)
    x, y = wl.inputs.to(dev), wl.targets.to(dev)
    opt = wl.optimizer(model.parameters(), foreach=True)
    compiled = [torch.compile(f, backend="lazyxla") for f in (model, wl.loss, opt.step)]

    def step():
        opt.zero_grad()
        loss = compiled[1](compiled[0], x, y)
        loss.backward()
        compiled[2]()
        return loss

    lx.sync()
    lx.wait_device_ops()
    return step


def train(name: str, steps: int = 120) -> None:
    step = make_step(name)
    spent = [0.0]
    barrier = api._barrier

    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return barrier(*args, **kwargs)
        finally:
            spent[0] += time.thread_time() - start
    api._barrier = timed
    rows: dict = {True: ([], []), False: ([], [])}
    for i in range(steps + 4):
        on = i % 2 == 0
        with config.override(step_capture=on):
            lx.wait_device_ops()
            spent[0] = 0.0
            start = time.thread_time()
            step()
            lx.sync()
            whole = time.thread_time() - start
        if i >= 4:
            rows[on][0].append(spent[0])
            rows[on][1].append(whole)
    captured = next(iter(step_capture._CAPTURES.values()))
    print(f"{name}: captured step of {len(captured.gather)} arguments and {len(captured.exe.outputs)} outputs")
    for on in (False, True):
        print(f"  capture {'on ' if on else 'off'}: barrier {_summary(rows[on][0])}; "
              f"step to sync {_summary(rows[on][1])} (main-thread CPU)")


def decode(tokens: int = 32, calls: int = 12) -> None:
    from decode_loop import TorchDecodeLoop
    from lazyxla.bench.gen_models import build_model, prompt
    model = build_model("llama", torch.float32).to(lx.device())
    ids = prompt(model, 1, 8)
    compiled = lambda f: torch.compile(f, backend="lazyxla")   # noqa: E731
    for system in ("compiled_step", "compiled"):
        whole = system == "compiled_step"
        loop = TorchDecodeLoop(model, lx.device(), barrier=lx.sync, wait=lx.wait_device_ops,
                               forward=None if whole else compiled(model.forward),
                               compile_step=compiled if whole else None)
        rates: dict = {True: [], False: []}
        outs: dict = {}
        for i in range(calls):
            on = i % 2 == 0
            with config.override(step_capture=on):
                timing = loop.run(ids, tokens)
            outs[on] = timing.ids
            if i >= 2:
                rates[on].append((tokens - 1) / max(timing.total_s - timing.prefill_s, 1e-9))
        print(f"{system}: decode tokens/s capture off {statistics.median(rates[False]):.1f}, on "
              f"{statistics.median(rates[True]):.1f}; tokens equal: {torch.equal(outs[True], outs[False])}")
        torch._dynamo.reset()


def generate(name: str = "llama", batch: int = 2, tokens: int = 32, calls: int = 10) -> None:
    from lazyxla.bench.gen_models import build_model, prompt, timed_generate
    model = build_model(name, torch.float32)
    ids = prompt(model, batch, 8)
    ref, _ = timed_generate(model, ids, tokens, "static")
    model.to(lx.device())
    model.forward = torch.compile(model.forward, backend="lazyxla")
    ids = ids.to(lx.device())
    rates: dict = {True: [], False: []}
    host: dict = {True: [], False: []}
    equal = True
    for i in range(calls + 2):
        on = i % 2 == 0
        with config.override(step_capture=on):
            _, prefill = timed_generate(model, ids, 1, "static")
            start = time.thread_time()
            out, seconds = timed_generate(model, ids, tokens, "static")
            cpu = time.thread_time() - start
        equal = equal and torch.equal(out, ref)
        if i >= 2:   # the first call of each mode compiles or records
            rates[on].append(batch * (tokens - 1) / max(seconds - prefill, 1e-9))
            host[on].append(cpu / tokens)
    for on in (False, True):
        print(f"generate() {name} batch {batch}, capture {'on ' if on else 'off'}: decode tokens/s "
              f"{statistics.median(rates[on]):.1f}, main-thread CPU {statistics.median(host[on]) * 1e3:.2f} ms "
              f"a token")
    print(f"tokens equal eager's in every call: {equal}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["decode"]:
        decode()
    elif sys.argv[1:2] == ["generate"]:
        generate(*(sys.argv[2:3] or ["llama"]), *[int(a) for a in sys.argv[3:4]])
    else:
        train(sys.argv[2] if len(sys.argv) > 2 else "gpt")
