"""Generation benchmark: Hugging Face greedy `generate()` on eager CPU, lazyxla (lazy and
with `torch.compile(model.forward, backend="lazyxla")`), PyTorch/XLA and the JAX limit
(lazyxla/bench/jax_decode.py), each model and system in a fresh process:

    python -m lazyxla.bench.generate --models llama,gpt2 --tokens 32

prints, per cell, the first and the second call (seconds), the second call's prefill and
decode tokens/s, compiles per call and whether the tokens equal eager's. `--torch-xla-python`
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


class FirstToken:
    """A streamer that notes when the prefill's token arrives (generate() hands it the
    prompt first, then each new token)."""

    def __init__(self) -> None:
        self.calls, self.first = 0, None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


def timed_generate(model, ids: torch.Tensor, tokens: int, cache: str) -> tuple:
    """One greedy generate() call: (ids on the CPU, seconds until the first new token,
    seconds for the other tokens)."""
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    streamer = FirstToken()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, streamer=streamer, **kw).cpu()
    end = time.perf_counter()
    first = streamer.first or end
    return out, first - start, end - first


def _compiles(system: str):
    """A function returning the compiles so far, for `system`."""
    if system in ("lazyxla", "compiled"):
        from lazyxla import metrics
        return lambda: metrics.counter_value("UncachedCompile") or 0
    if system == "torch_xla":
        import torch_xla.debug.metrics as met
        return lambda: (met.metric_data("CompileTime") or (0,))[0]
    return lambda: 0


def run_cell(model_name: str, system: str, tokens: int, cache: str, batch: int, length: int) -> dict:
    """Two calls of one system on one model, in this process."""
    model = build_model(model_name)
    ids = prompt(model, batch, length)
    if system == "jax":
        from jax_decode import Decoder   # noqa: the child puts this folder on sys.path
        decoder = Decoder(model)
        call = lambda: decoder.generate(ids, tokens)   # noqa: E731
    else:
        if system in ("lazyxla", "compiled"):
            import lazyxla as lx
            device = lx.device()
        elif system == "torch_xla":
            import torch_xla
            device = torch_xla.device()
        else:
            device = torch.device("cpu")
        model.to(device)
        if system == "compiled":
            model.forward = torch.compile(model.forward, backend="lazyxla")
        call = lambda: timed_generate(model, ids.to(device), tokens, cache)   # noqa: E731
    compiles = _compiles(system)
    calls = []
    for _ in range(2):
        before = compiles()
        start = time.perf_counter()
        out, prefill, decode = call()
        calls.append({"seconds": time.perf_counter() - start, "prefill": prefill,
                      "decode_tokens_per_s": (tokens - 1) / max(decode, 1e-9), "compiles": compiles() - before,
                      "ids": out.tolist()})
    return {"model": model_name, "system": system, "calls": calls}


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


def table(cells: list) -> str:
    """Markdown rows of `cells`; tokens compared with the eager cell of the same model."""
    eager = {c["model"]: c["calls"][0]["ids"] for c in cells if c["system"] == "eager" and "calls" in c}
    rows = ["| model | system | first call s | second call s | prefill s | decode tokens/s | compiles "
            "(1st / 2nd) | tokens equal eager |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if "calls" not in c:
            rows.append(f"| {c['model']} | {c['system']} | failed: {' '.join(c['error'])[-200:]} |||||||")
            continue
        one, two = c["calls"]
        same = c["model"] in eager and all(call["ids"] == eager[c["model"]] for call in c["calls"])
        rows.append(f"| {c['model']} | {c['system']} | {one['seconds']:.2f} | {two['seconds']:.3f} | "
                    f"{two['prefill']:.3f} | {two['decode_tokens_per_s']:.1f} | {one['compiles']} / {two['compiles']} "
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
    ap.add_argument("--rounds", type=int, default=1, help="run every cell this many times, interleaved")
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
