"""What every cell of the generation benchmark (lazyxla/bench/generate.py) starts from: the
models and prompts (random init from a fixed seed, no download, so every system's process
builds the same weights) and the timed Hugging Face `generate()` call.

- `llama`: a tiny Llama (2 layers, d 32, grouped-query attention), float32: tests and
  quick checks, eager runs it in milliseconds.
- `gpt2`: Hugging Face's GPT-2 124M configuration, float32.
- `llama1b`: the shape of Llama 3.2 1B (hidden 2048, 16 layers, 32 heads, 8 KV heads,
  head_dim 64, intermediate 8192, vocabulary 128,256, tied embeddings, rope theta 500,000),
  1.24 B parameters in bfloat16. Chosen because it is the 1B Llama people run, and it fits a
  TPU v5e's 15.7 GiB at batch 32, prompt 128 and 128 new tokens with room to spare: weights
  2.47 GB, static K/V cache 2 x 16 x 32 x 8 x 256 x 64 x 2 bytes = 0.27 GB, the prefill's
  last-position logits 32 x 128,256 (the loop asks for the last position only). Building
  it takes about 9 s of one CPU core (normal init of 1.24 B values).

Imports only torch and transformers (the eager cell loads neither lazyxla nor JAX).
"""
from __future__ import annotations

import time
from typing import Dict, Optional, Tuple

import torch

MODELS = ("llama", "gpt2", "llama1b")
# each model's dtype unless the bench is told otherwise (--dtype)
DEFAULT_DTYPE: Dict[str, torch.dtype] = {"llama": torch.float32, "gpt2": torch.float32, "llama1b": torch.bfloat16}
DTYPES: Dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _config(name: str):
    # deferred: transformers loads in a second or more; only the models need it
    import transformers
    if name == "gpt2":
        return transformers.GPT2LMHeadModel, transformers.GPT2Config()
    if name == "llama":
        return transformers.LlamaForCausalLM, transformers.LlamaConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256)
    if name == "llama1b":
        return transformers.LlamaForCausalLM, transformers.LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=4096,
            rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True)
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def build_model(name: str, dtype: Optional[torch.dtype] = None) -> torch.nn.Module:
    """Model `name` (see the module docstring) in `dtype` (default: the model's own), random
    init from seed 0, in eval mode, on the CPU."""
    cls, cfg = _config(name)
    dtype = dtype or DEFAULT_DTYPE[name]
    torch.manual_seed(0)
    try:   # deferred, as transformers itself (_config): seconds to import, needed only here
        from transformers.initialization import no_init_weights
    except ImportError:   # transformers before 5: torch's init, then the model's own over it
        return cls._from_config(cfg, dtype=dtype).eval()
    # built in its dtype directly (a 1B float32 copy first would cost 5 GB and twice the
    # time), without torch's own init, which the model's init_weights overwrites anyway:
    # 1B in 9 s of one core instead of 21 (every process of the bench builds it)
    with no_init_weights():
        model = cls._from_config(cfg, dtype=dtype)
    model.init_weights()
    return model.eval()


def parameter_count(name: str) -> int:
    """Model `name`'s parameters, counted on the meta device: no weight is made."""
    cls, cfg = _config(name)
    with torch.device("meta"):
        model = cls._from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def prompt(model: torch.nn.Module, batch: int, length: int) -> torch.Tensor:
    """[batch, length] random token ids, the same for a given model vocabulary and shape."""
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(1))


def timed_generate(model: torch.nn.Module, ids: torch.Tensor, tokens: int, cache: str) -> Tuple[torch.Tensor, float]:
    """One greedy generate() call of exactly `tokens` new tokens: (ids on the CPU, seconds)."""
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, **kw).cpu()
    return out, time.perf_counter() - start
