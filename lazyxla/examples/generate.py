"""Hugging Face generate() on lazyxla against eager CPU: prefill, decode tokens/s, compiles.

    python -m lazyxla.examples.generate --model llama --tokens 32 --cache static --compiled

builds a random-init model (no download: `llama` is a tiny Llama, `gpt2` Hugging Face's
GPT-2 124M configuration), runs the same greedy `generate()` twice on eager CPU and
twice on lazyxla (and, with `--compiled`, twice more with the model's forward under
`torch.compile(backend="lazyxla")`, transformers' documented XLA route), and prints per call: the prefill time (the first token), decode
tokens/s over the other tokens, compiles and device graphs, and whether the tokens equal
eager's. Timings are wall clock on this machine; the counts are what lazyxla promises
(static cache: 2 compiles on the first call, none on the second).
"""
from __future__ import annotations

import argparse
import time

import torch


def _model(name: str):
    import transformers
    torch.manual_seed(0)
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


class _FirstToken:
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


def _call(model, ids, tokens: int, cache: str) -> tuple:
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    streamer = _FirstToken()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, streamer=streamer, **kw).cpu()
    end = time.perf_counter()
    first = streamer.first or end
    return out, first - start, (tokens - 1) / max(end - first, 1e-9)


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
    import lazyxla as lx
    model = _model(args.model)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(1))
    print(f"{args.model}, batch {args.batch}, prompt {args.prompt}, {args.tokens} new tokens, "
          f"{args.cache} cache, greedy")
    reference = None
    for call in range(2):
        out, prefill, rate = _call(model, ids, args.tokens, args.cache)
        reference = out
        print(f"eager CPU  call {call + 1}: prefill {prefill:7.3f} s  decode {rate:8.1f} tokens/s")
    model.to(lx.device())
    modes = ("lazyxla", "compiled") if args.compiled else ("lazyxla",)
    for mode in modes:
        if mode == "compiled":
            model.forward = torch.compile(model.forward, backend="lazyxla")
        for call in range(2):
            lx.metrics.clear_all()
            out, prefill, rate = _call(model, ids.to(lx.device()), args.tokens, args.cache)
            compiles = lx.metrics.counter_value("UncachedCompile") or 0
            graphs = lx.metrics.counter_value("ExecuteComputation") or 0
            print(f"{mode:10} call {call + 1}: prefill {prefill:7.3f} s  decode {rate:8.1f} tokens/s  "
                  f"{compiles} compiles, {graphs} graphs, tokens equal eager: {torch.equal(out, reference)}")


if __name__ == "__main__":
    main()
