"""generate()'s floor: what Hugging Face `generate()` itself costs per token on the host,
with the model call replaced by a stub that returns fixed logits.

Everything else is generate()'s own: its stopping criteria, logits processors, cache set-up
and `input_ids` growth, on CPU tensors of the benchmarked model's batch, vocabulary and
dtype. No PyTorch system can run generate() faster per token than this on the same host;
lazyxla/bench/generate.py reports it beside the generate() rows. Imports only torch and
transformers.
"""
from __future__ import annotations

from typing import Any

import torch


def stub_forward(model: torch.nn.Module) -> None:
    """Replace `model`'s forward with one that returns the same logits every call ([B, 1, V]
    in the model's dtype, greedy picks token 1) and touches no weight. The cache generate()
    hands in is handed back untouched."""
    from transformers.modeling_outputs import CausalLMOutputWithPast   # deferred: transformers is slow to load
    vocab = model.config.vocab_size
    dtype = next(model.parameters()).dtype

    def forward(input_ids: torch.Tensor = None, **kw: Any) -> CausalLMOutputWithPast:
        # a fresh tensor each call, as a model returns: generate()'s processors may write into it
        logits = torch.zeros(input_ids.shape[0], 1, vocab, dtype=dtype)
        logits[..., 1] = 1.0
        cache = kw.get("cache", kw.get("past_key_values"))
        return CausalLMOutputWithPast(logits=logits, past_key_values=cache)

    model.forward = forward
