"""Hugging Face generate() on lazyxla against eager CPU: time, tokens/s and compiles per call.

    python -m lazyxla.examples.generate --model llama --tokens 32 --cache static --compiled

builds a random-init model (no download: `llama` is a tiny Llama, `gpt2` Hugging Face's
GPT-2 124M configuration), runs the same greedy `generate()` twice on eager CPU and
twice on lazyxla (and, with `--compiled`, twice more with the model's forward under
`torch.compile(backend="lazyxla")`, transformers' documented XLA route), and prints per
call: its time and tokens/s, compiles and device graphs, and whether the tokens equal
eager's. Timings are wall clock on this machine; the counts are what lazyxla promises (static cache: 2 compiles on the first call,
none on the second). `python -m lazyxla.bench.generate` compares more systems, each in a
fresh process.
"""
from __future__ import annotations

import argparse

import torch

import lazyxla as lx

from ..bench.generate import build_model, prompt, timed_generate


def _row(label: str, call: int, seconds: float, tokens: int) -> str:
    return f"{label:10} call {call + 1}: {seconds:7.3f} s, {tokens / seconds:8.1f} tokens/s"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("llama", "gpt2"), default="llama")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--cache", choices=("static", "dynamic"), default="static")
    parser.add_argument("--compiled", action="store_true",
                        help="also run generate() with torch.compile(model.forward, backend='lazyxla')")
    args = parser.parse_args(argv)
    model = build_model(args.model)
    ids = prompt(model, args.batch, args.prompt)
    print(f"{args.model}, batch {args.batch}, prompt {args.prompt}, {args.tokens} new tokens, "
          f"{args.cache} cache, greedy")
    for call in range(2):
        reference, seconds = timed_generate(model, ids, args.tokens, args.cache)
        print(_row("eager CPU", call, seconds, args.tokens))
    model.to(lx.device())
    for mode in ("lazyxla", "compiled") if args.compiled else ("lazyxla",):
        if mode == "compiled":
            model.forward = torch.compile(model.forward, backend="lazyxla")
        for call in range(2):
            lx.metrics.clear_all()
            out, seconds = timed_generate(model, ids.to(lx.device()), args.tokens, args.cache)
            compiles = lx.metrics.counter_value("UncachedCompile") or 0
            graphs = lx.metrics.counter_value("ExecuteComputation") or 0
            print(f"{_row(mode, call, seconds, args.tokens)}  {compiles} compiles, {graphs} graphs, "
                  f"tokens equal eager: {torch.equal(out, reference)}")


if __name__ == "__main__":
    main()
