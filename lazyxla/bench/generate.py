"""Generation benchmark: Hugging Face greedy `generate()` on eager CPU, lazyxla (lazy and
with `torch.compile(model.forward, backend="lazyxla")`), PyTorch/XLA and the JAX limit
(lazyxla/bench/jax_decode.py), each model and system in a fresh process:

    python -m lazyxla.bench.generate --models llama,gpt2 --tokens 32

prints, per cell, the first and the second call (seconds), the prefill (a one-token call)
and decode tokens/s (the second call less the prefill), compiles per call and whether the tokens equal eager's. `--torch-xla-python`
adds PyTorch/XLA from another interpreter (PJRT_DEVICE=CPU). lazyxla cells run with the
persistent compile cache off, so a first call compiles as in a new install.

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

import torch

MODELS = ("llama", "gpt2")
SYSTEMS = ("eager", "lazyxla", "compiled", "jax", "torch_xla")


def build_model(name: str) -> torch.nn.Module:
    """`llama`: a tiny random-init Llama (2 layers, d 32, grouped-query attention); `gpt2`:
    Hugging Face's GPT-2 124M configuration, random init. No download."""
    # deferred: transformers loads in a second or more; only the models need it
    import transformers
    torch.manual_seed(0)
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    if name == "llama":
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
        return transformers.LlamaForCausalLM(cfg).eval()
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def prompt(model: torch.nn.Module, batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(1))


def timed_generate(model, ids: torch.Tensor, tokens: int, cache: str) -> tuple:
    """One greedy generate() call: (ids on the CPU, seconds)."""
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, **kw).cpu()
    return out, time.perf_counter() - start


def _compiles(system: str):
    """A function returning the compiles so far, for `system`."""
    if system in ("lazyxla", "compiled"):
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from lazyxla import metrics
        return lambda: metrics.counter_value("UncachedCompile") or 0
    if system == "torch_xla":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        import torch_xla.debug.metrics as met
        return lambda: (met.metric_data("CompileTime") or (0,))[0]
    return lambda: 0


def run_cell(model_name: str, system: str, tokens: int, cache: str, batch: int, length: int) -> dict:
    """Two calls of one system on one model, in this process."""
    model = build_model(model_name)
    ids = prompt(model, batch, length)
    if system == "jax":
        from jax_decode import Decoder   # lazy: the JAX cell's child puts this folder on sys.path (main)
        decoder = Decoder(model)
        call = lambda n: decoder.generate(ids, n)   # noqa: E731
    else:
        if system in ("lazyxla", "compiled"):
            # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
            import lazyxla as lx
            device = lx.device()
        elif system == "torch_xla":
            # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
            import torch_xla
            device = torch_xla.device()
        else:
            device = torch.device("cpu")
        model.to(device)
        if system == "compiled":
            model.forward = torch.compile(model.forward, backend="lazyxla")
        call = lambda n: timed_generate(model, ids.to(device), n, cache)   # noqa: E731
    compiles = _compiles(system)
    calls = []
    for _ in range(2):
        before = compiles()
        out, seconds = call(tokens)
        calls.append({"seconds": seconds, "compiles": compiles() - before, "ids": out.tolist()})
    # the prefill alone: a one-token call (the static cache's length differs, so lazyxla
    # may compile its prefill once more; timed on the second of two such calls)
    call(1)
    _, prefill = call(1)
    decode = max(calls[1]["seconds"] - prefill, 1e-9)
    return {"model": model_name, "system": system, "calls": calls, "prefill": prefill,
            "decode_tokens_per_s": (tokens - 1) / decode}


def _child(args) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)           # no sibling module shadows a top-level one ...
    sys.path.append(here)         # ... but jax_decode is found for the JAX cell
    cell = run_cell(args.model, args.cell, args.tokens, args.cache, args.batch, args.prompt)
    print("CELL " + json.dumps(cell), flush=True)


def _command(system: str, args) -> list:
    this = os.path.abspath(__file__)
    python = args.torch_xla_python if system == "torch_xla" else sys.executable
    return [python, this, "--cell", system]


def _run(system: str, model: str, args) -> dict:
    env = dict(os.environ, LAZYXLA_CACHE_DIR="", PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"))
    cmd = _command(system, args) + ["--model", model, "--tokens", str(args.tokens), "--cache", args.cache,
                                    "--batch", str(args.batch), "--prompt", str(args.prompt)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    for line in done.stdout.splitlines():
        if line.startswith("CELL "):
            return json.loads(line[5:])
    return {"model": model, "system": system, "error": (done.stderr or done.stdout).strip().splitlines()[-5:]}


def best(cells: list) -> list:
    """One cell per (model, system): the fastest of its rounds in each figure (other work on
    the machine only ever slows a run down); the tokens of every round."""
    merged: dict = {}
    for c in cells:
        key = (c["model"], c["system"])
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
        m["decode_tokens_per_s"] = max(m["decode_tokens_per_s"], c["decode_tokens_per_s"])
    return list(merged.values())


def table(cells: list) -> str:
    """Markdown rows of `cells` (`best` of the rounds); tokens compared with the eager cell of
    the same model."""
    cells = best(cells)
    eager = {c["model"]: c["calls"][0]["ids"] for c in cells if c["system"] == "eager" and "calls" in c}
    rows = ["| model | system | first call s | second call s | prefill s | decode tokens/s | compiles "
            "(1st / 2nd) | tokens equal eager |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if "calls" not in c:
            rows.append(f"| {c['model']} | {c['system']} | failed: {' '.join(c['error'])[-200:]} |||||||")
            continue
        one, two = c["calls"]
        same = c["model"] in eager and all(call["ids"] == eager[c["model"]] and call.get("same", True)
                                           for call in c["calls"])
        rows.append(f"| {c['model']} | {c['system']} | {one['seconds']:.2f} | {two['seconds']:.3f} | "
                    f"{c['prefill']:.3f} | {c['decode_tokens_per_s']:.1f} | {one['compiles']} / {two['compiles']} "
                    f"| {'yes' if same else 'no'} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--systems", default="eager,lazyxla,compiled,jax")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--cache", choices=("static", "dynamic"), default="static")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every cell this many times, interleaved; the table shows the fastest of each figure")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    ap.add_argument("--torch-xla-python", metavar="PYTHON", help="interpreter of an environment with torch_xla")
    ap.add_argument("--json", help="also write the cells to this file")
    ap.add_argument("--cell", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        return _child(args)
    systems = [s for s in args.systems.split(",") if s]
    if "torch_xla" in systems and not args.torch_xla_python:
        ap.error("the torch_xla system needs --torch-xla-python (an interpreter with torch_xla installed)")
    if "eager" not in systems:
        systems.insert(0, "eager")   # the tokens every other system is checked against
    cells = []
    for _ in range(args.rounds):
        for model in args.models.split(","):
            for system in systems:
                cells.append(_run(system, model, args))
                print(f"{model} {system}: done", file=sys.stderr, flush=True)
    load = "/".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"{args.tokens} new tokens, batch {args.batch}, prompt {args.prompt}, {args.cache} cache, greedy; "
          f"load {load}")
    print(table(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cells, f)


if __name__ == "__main__":
    main()
