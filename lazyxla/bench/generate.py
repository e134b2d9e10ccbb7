"""Generation benchmark: greedy decoding on eager CPU, lazyxla (lazy and compiled with
`torch.compile(model.forward, backend="lazyxla")`), PyTorch/XLA and the JAX limit
(lazyxla/bench/jax_decode.py), each model and system in a fresh process, in two forms:

    python -m lazyxla.bench.generate --form generate --models llama,gpt2 --tokens 32
    python -m lazyxla.bench.generate --form loop --models gpt2,llama1b --batch 1,32 --prompt 128 --tokens 128

- `generate`: Hugging Face `generate()`. Per cell the first and second call (seconds), the
  prefill (a one-token call) and decode (the second call less the prefill). The `floor`
  system is generate() with the model call stubbed (lazyxla/bench/generate_floor.py): its
  own Python per token on the CPU.
- `loop`: the JAX loop's form in PyTorch (lazyxla/bench/decode_loop.py): static cache, one
  model call per token, the token fed back on the device, one read at the end; the prefill
  is timed inside the call. System `compiled_step` compiles the whole step (model call,
  argmax, next position) instead of the model's forward alone.

Both report decode steps/s (tokens per sequence per second), decode tokens/s (the batch's),
the same per chip, compiles per call, and how many leading new tokens equal eager's and the
JAX loop's (the least over the batch's rows). Eager runs by default only for models under
200 M parameters (`--eager auto`): a 1B model's CPU run takes minutes, so its cells say "not
checked" against eager and are compared with the JAX loop. lazyxla cells run with the
persistent compile cache off, so a first call compiles as in a new install. Each cell is a
child process under `--timeout` seconds; what it finished before the limit is kept.

This file runs as a script by path in each child (`--cell`), so that importing it imports
neither lazyxla nor JAX into the eager and PyTorch/XLA children.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

if __package__:
    from .gen_models import DTYPES, MODELS, build_model, parameter_count, prompt, timed_generate
else:   # run by path as a cell's child: this folder is sys.path[0] until _child moves it
    from gen_models import DTYPES, MODELS, build_model, parameter_count, prompt, timed_generate

__all__ = ["MODELS", "build_model", "prompt", "timed_generate", "table", "best", "main"]

FORMS = ("generate", "loop")
SYSTEMS = {"generate": ("eager", "lazyxla", "compiled", "jax", "torch_xla", "floor"),
           "loop": ("eager", "lazyxla", "compiled", "compiled_step", "jax")}
# --eager auto: eager CPU runs only for models below this many parameters (GPT-2 124M yes, 1B no)
EAGER_AUTO_MAX_PARAMS = 200_000_000


def _compiles(system: str) -> Callable[[], int]:
    """A function returning the compiles so far, for `system` (the JAX cell counts its own)."""
    if system in ("lazyxla", "compiled", "compiled_step"):
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from lazyxla import metrics
        return lambda: metrics.counter_value("UncachedCompile") or 0
    if system == "torch_xla":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        import torch_xla.debug.metrics as met
        return lambda: (met.metric_data("CompileTime") or (0,))[0]
    return lambda: 0


def _device(system: str) -> Tuple[torch.device, Callable[[], None], Callable[[], None]]:
    """`system`'s device, its step barrier and its wait for the device (eager: no-ops)."""
    if system in ("lazyxla", "compiled", "compiled_step"):
        # lazy: only the lazyxla cells import lazyxla (and JAX)
        import lazyxla as lx
        return lx.device(), lx.sync, lx.wait_device_ops
    if system == "torch_xla":
        # lazy: only the PyTorch/XLA cell imports torch_xla
        import torch_xla
        import torch_xla.core.xla_model as xm
        return torch_xla.device(), xm.mark_step, xm.wait_device_ops
    nothing = lambda: None   # noqa: E731
    return torch.device("cpu"), nothing, nothing


def _platform(system: str) -> str:
    """Where `system`'s model runs: "cpu", "tpu" or "gpu" (so a TPU run's JSON shows it was)."""
    if system in ("lazyxla", "compiled", "compiled_step"):
        import lazyxla as lx   # lazy: only the lazyxla cells import lazyxla (and JAX)
        return lx.platform()
    if system == "jax":
        import jax   # lazy: only the JAX and lazyxla cells import JAX
        return jax.default_backend()
    if system == "torch_xla":
        import torch_xla   # lazy: only the PyTorch/XLA cell imports torch_xla
        return str(torch_xla.device())
    return "cpu"   # eager and the floor run on the host


def _generate_caller(model: torch.nn.Module, system: str, cache: str):
    """generate() cells: a function of (prompt ids, new tokens) -> (ids, seconds), and one
    returning the compiles so far."""
    if system == "floor":
        from generate_floor import stub_forward   # lazy: the child put this folder on sys.path (_child)
        stub_forward(model)
        return (lambda ids, n: timed_generate(model, ids, n, cache)), _compiles(system)
    if system == "jax":
        from jax_decode import Decoder   # lazy: the JAX cell's child puts this folder on sys.path (_child)
        decoder = Decoder(model)
        return decoder.generate, decoder.compiles
    device, _, _ = _device(system)
    model.to(device)
    if system == "compiled":
        model.forward = torch.compile(model.forward, backend="lazyxla")
    return (lambda ids, n: timed_generate(model, ids.to(device), n, cache)), _compiles(system)


def _generate_cell(model: torch.nn.Module, batch: int, length: int, tokens: int, caller) -> dict:
    """Two generate() calls, then the prefill alone: a one-token call (the static cache's
    length differs, so lazyxla may compile its prefill once more; timed on the second of two
    such calls)."""
    call, compiles = caller
    ids = prompt(model, batch, length)
    calls = []
    for _ in range(2):
        before = compiles()
        out, seconds = call(ids, tokens)
        calls.append({"seconds": seconds, "compiles": compiles() - before, "ids": out.tolist()})
    call(ids, 1)
    _, prefill = call(ids, 1)
    return {"calls": calls, "prefill": prefill, "decode_s": max(calls[1]["seconds"] - prefill, 1e-9)}


def _loop_caller(model: torch.nn.Module, system: str, tokens: int):
    """Loop-form cells: a function of prompt ids -> (ids, prefill seconds, seconds), and one
    returning the compiles so far."""
    if system == "jax":
        from jax_decode import Decoder   # lazy: the JAX cell's child puts this folder on sys.path (_child)
        decoder = Decoder(model)
        return (lambda ids: decoder.run(ids, tokens)), decoder.compiles
    from decode_loop import TorchDecodeLoop   # lazy: the child put this folder on sys.path (_child)
    device, barrier, wait = _device(system)
    model.to(device)
    forward = torch.compile(model.forward, backend="lazyxla") if system == "compiled" else None
    compile_step = (lambda f: torch.compile(f, backend="lazyxla")) if system == "compiled_step" else None
    loop = TorchDecodeLoop(model, device, barrier=barrier, wait=wait, forward=forward, compile_step=compile_step)

    def call(ids: torch.Tensor) -> tuple:
        t = loop.run(ids, tokens)
        return t.ids, t.prefill_s, t.total_s
    return call, _compiles(system)


def _loop_cell(model: torch.nn.Module, system: str, batch: int, length: int, caller) -> dict:
    """Two loop calls; prefill and decode from the second (the first compiles)."""
    call, compiles = caller
    ids = prompt(model, batch, length)
    calls = []
    for _ in range(2):
        before = compiles()
        out, prefill, seconds = call(ids)
        calls.append({"seconds": seconds, "prefill": prefill, "compiles": compiles() - before, "ids": out.tolist()})
    second = calls[1]
    return {"calls": calls, "prefill": second["prefill"], "decode_s": max(second["seconds"] - second["prefill"], 1e-9)}


def run_cells(form: str, model_name: str, system: str, batches: List[int], length: int, tokens: int,
              cache: str = "static", dtype: Optional[str] = None) -> Iterator[dict]:
    """One system on one model, in this process: a result per batch size, as each finishes.
    The model is built once; each batch size compiles its own shapes."""
    model = build_model(model_name, DTYPES[dtype] if dtype else None)
    params = sum(p.numel() for p in model.parameters())
    if form == "generate":
        caller = _generate_caller(model, system, cache)
    else:
        caller = _loop_caller(model, system, tokens)
    for batch in batches:
        if form == "generate":
            cell = _generate_cell(model, batch, length, tokens, caller)
        else:
            cell = _loop_cell(model, system, batch, length, caller)
        decode_steps = tokens - 1   # the prefill gives the first new token
        yield {"form": form, "model": model_name, "system": system, "batch": batch, "prompt": length,
               "tokens": tokens, "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
               "params": params, "chips": 1, "platform": _platform(system), **cell,
               "decode_steps_per_s": decode_steps / cell["decode_s"],
               "decode_tokens_per_s": batch * decode_steps / cell["decode_s"]}


def _child(args) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)           # no sibling module shadows a top-level one ...
    sys.path.append(here)         # ... but jax_decode, decode_loop and generate_floor are found
    batches = [int(b) for b in args.batch.split(",")]
    for cell in run_cells(args.form, args.model, args.cell, batches, args.prompt, args.tokens, args.cache, args.dtype):
        print("CELL " + json.dumps(cell), flush=True)   # one line per batch: a later timeout keeps it


def _command(system: str, args) -> List[str]:
    this = os.path.abspath(__file__)
    python = args.torch_xla_python if system == "torch_xla" else sys.executable
    cmd = [python, this, "--cell", system, "--form", args.form, "--tokens", str(args.tokens), "--cache",
           args.cache, "--batch", args.batch, "--prompt", str(args.prompt)]
    return cmd + (["--dtype", args.dtype] if args.dtype else [])


def _text(out) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def _run(system: str, model: str, args, limit: float) -> List[dict]:
    """One child process under `limit` seconds: its cells, and an error cell for each batch it
    did not finish (none started when the run's deadline has passed)."""
    env = dict(os.environ, LAZYXLA_CACHE_DIR="", PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"))
    if system in ("eager", "floor"):
        env["JAX_PLATFORMS"] = "cpu"   # these never touch JAX; never let them hold the chip either
    if limit < 1:
        stdout, why = "", ["skipped: the run's --deadline had passed"]
    else:
        try:
            done = subprocess.run(_command(system, args) + ["--model", model], capture_output=True, text=True,
                                  env=env, timeout=limit)
            stdout, why = done.stdout, (done.stderr or done.stdout).strip().splitlines()[-5:]
        except subprocess.TimeoutExpired as e:
            stdout, why = _text(e.stdout), [f"timed out after {limit:.0f} s"]
    cells = [json.loads(line[5:]) for line in stdout.splitlines() if line.startswith("CELL ")]
    finished = {c["batch"] for c in cells}
    for batch in (int(b) for b in args.batch.split(",")):
        if batch not in finished:
            cells.append({"form": args.form, "model": model, "system": system, "batch": batch, "error": why})
    return cells


def _key(c: dict) -> tuple:
    return c.get("form", "generate"), c["model"], c["system"], c.get("batch", 0)


def best(cells: List[dict]) -> List[dict]:
    """One cell per (form, model, system, batch): the fastest of its rounds in each figure
    (other work on the machine only ever slows a run down); the tokens of every round."""
    merged: Dict[tuple, dict] = {}
    for c in cells:
        key = _key(c)
        m = merged.get(key)
        if m is None or "calls" not in m:     # first round, or every earlier one failed
            merged[key] = {**c, "calls": [dict(call) for call in c["calls"]]} if "calls" in c else c
            continue
        if "calls" not in c:
            continue
        for mine, other in zip(m["calls"], c["calls"]):
            mine["seconds"] = min(mine["seconds"], other["seconds"])
            mine["same"] = mine.get("same", True) and mine["ids"] == other["ids"]
        m["prefill"] = min(m["prefill"], c["prefill"])
        for figure in ("decode_tokens_per_s", "decode_steps_per_s"):
            if figure in c:
                m[figure] = max(m[figure], c[figure])
    return list(merged.values())


def leading_equal(ids: List[List[int]], reference: List[List[int]], start: int) -> int:
    """How many new tokens (from column `start`) equal the reference's before the first that
    differs, the least over the rows: greedy decoding diverges for good after one flip."""
    if len(ids) != len(reference):
        return 0
    least = None
    for row, ref in zip(ids, reference):
        n = 0
        for a, b in zip(row[start:], ref[start:]):
            if a != b:
                break
            n += 1
        least = n if least is None else min(least, n)
    return least or 0


def _agreement(c: dict, reference: Optional[dict]) -> str:
    """'yes' when every call's new tokens equal the reference's (and the rounds agree), else
    'k/T' leading tokens equal (', rounds differ' when rounds decoded differently); 'not
    checked' without a reference cell."""
    if reference is None or "calls" not in reference:
        return "not checked"
    ref = reference["calls"][0]["ids"]
    start = len(ref[0]) - c["tokens"] if ref else 0
    counts = [leading_equal(call["ids"], ref, start) for call in c["calls"]]
    same_rounds = all(call.get("same", True) for call in c["calls"])
    n = min(counts)
    if not same_rounds:   # a round decoded other tokens than the first: never "yes"
        return f"{n}/{c['tokens']}, rounds differ"
    return "yes" if n == c["tokens"] else f"{n}/{c['tokens']}"


def table(cells: List[dict]) -> str:
    """Markdown rows of `cells` (`best` of the rounds); tokens compared with the eager cell
    and the JAX cell of the same form, model and batch."""
    cells = best(cells)
    by_key = {_key(c): c for c in cells}
    rows = ["| form | model | dtype | batch | system | first call s | second call s | prefill s | decode steps/s "
            "| decode tokens/s | tokens/s per chip | compiles (1st / 2nd) | tokens equal eager | tokens equal jax |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        form, model, system, batch = _key(c)
        if "calls" not in c:
            rows.append(f"| {form} | {model} | | {batch} | {system} | failed: {' '.join(c['error'])[-200:]} "
                        "|||||||||")
            continue
        one, two = c["calls"]
        if system == "floor":     # fixed tokens from a stub: nothing to compare
            vs_eager = vs_jax = "n/a (stub)"
        else:
            vs_eager = "reference" if system == "eager" else _agreement(c, by_key.get((form, model, "eager", batch)))
            vs_jax = "reference" if system == "jax" else _agreement(c, by_key.get((form, model, "jax", batch)))
        where = f" ({c['platform']})" if "platform" in c else ""
        rows.append(f"| {form} | {model} | {c.get('dtype', '')} | {batch} | {system}{where} | {one['seconds']:.2f} | "
                    f"{two['seconds']:.3f} | {c['prefill']:.3f} | {c['decode_steps_per_s']:.1f} | "
                    f"{c['decode_tokens_per_s']:.1f} | {c['decode_tokens_per_s'] / c.get('chips', 1):.1f} | "
                    f"{one['compiles']} / {two['compiles']} | {vs_eager} | {vs_jax} |")
    return "\n".join(rows)


def _with_eager(systems: List[str], model: str, eager: str) -> List[str]:
    """The systems to run for `model`: eager first when asked or (auto) when the model is small
    enough for a CPU run (the tokens every other system is checked against)."""
    systems = [s for s in systems if s != "eager"]
    if eager == "yes" or (eager == "auto" and _small(model)):
        return ["eager"] + systems
    return systems


def _small(model: str) -> bool:
    # counted on the meta device: building a 1B model just to count would cost seconds and 2.5 GB
    return parameter_count(model) < EAGER_AUTO_MAX_PARAMS


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--form", choices=FORMS, default="generate")
    ap.add_argument("--models", default="llama,gpt2", help=f"comma-separated, of {','.join(MODELS)}")
    ap.add_argument("--systems", default="eager,lazyxla,compiled,jax",
                    help="comma-separated; generate form: eager,lazyxla,compiled,jax,torch_xla,floor; "
                         "loop form: eager,lazyxla,compiled,compiled_step,jax")
    ap.add_argument("--eager", choices=("auto", "yes", "no"), default="auto",
                    help="run eager CPU (the token reference): auto = for models under 200 M parameters")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per sequence")
    ap.add_argument("--cache", choices=("static", "dynamic"), default="static", help="generate form only")
    ap.add_argument("--batch", default="2", help="batch sizes, comma-separated (e.g. 1,8,32); one process "
                                                   "per system runs them all")
    ap.add_argument("--prompt", type=int, default=8, help="prompt length")
    ap.add_argument("--dtype", choices=tuple(DTYPES), help="every model in this dtype (default: the model's own, "
                                                           "bfloat16 for llama1b, float32 otherwise)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every cell this many times, interleaved; the table shows the fastest of each figure")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per child process (one model and system)")
    ap.add_argument("--deadline", type=float, help="seconds for the whole run: each child gets at most what is "
                                                   "left, later ones are skipped; the table is printed either way")
    ap.add_argument("--torch-xla-python", metavar="PYTHON", help="interpreter of an environment with torch_xla")
    ap.add_argument("--json", help="also write the cells to this file (rewritten after every cell)")
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        return _child(args)
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS[args.form]]
    if unknown:
        ap.error(f"the {args.form} form has no system {', '.join(unknown)}; it has {', '.join(SYSTEMS[args.form])}")
    if "torch_xla" in systems and not args.torch_xla_python:
        ap.error("the torch_xla system needs --torch-xla-python (an interpreter with torch_xla installed)")
    cells: List[dict] = []
    end = time.monotonic() + (args.deadline if args.deadline is not None else float("inf"))
    for _ in range(args.rounds):
        for model in args.models.split(","):
            for system in _with_eager(systems, model, args.eager):
                for cell in _run(system, model, args, min(args.timeout, end - time.monotonic())):
                    cells.append(cell)
                    done = (f"decode {cell['decode_tokens_per_s']:.1f} tokens/s, first call "
                            f"{cell['calls'][0]['seconds']:.1f} s" if "calls" in cell else "failed")
                    print(f"{args.form} {model} {system} batch {cell['batch']}: {done}", file=sys.stderr, flush=True)
                if args.json:   # after every cell: a run stopped from outside keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump(cells, f)
    load = "/".join(f"{v:.1f}" for v in os.getloadavg())
    what = "generate()" if args.form == "generate" else "decode loop"
    cache = f", {args.cache} cache" if args.form == "generate" else ", static cache"
    print(f"{what}: {args.tokens} new tokens, prompt {args.prompt}{cache}, greedy; load {load}")
    print(table(cells))


if __name__ == "__main__":
    main()
