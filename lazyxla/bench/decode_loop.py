"""The decode loop form of greedy generation in PyTorch: what bench/jax_decode.py does in JAX,
written with a Hugging Face model and nothing of `generate()`.

A static cache (transformers' `StaticCache`), the prompt in one model call (the prefill),
then one model call per new token: the greedy argmax stays on the device, the token is fed
back as a device tensor, the positions advance on the device, and the tokens are read to
the host once, at the end. The same code runs on eager CPU, lazyxla (lazy mode, a step
barrier per token), compiled (`torch.compile(model.forward, backend="lazyxla")`) and
compiled step (`torch.compile` of the whole step: model call, argmax, next position);
`lazyxla/bench/generate.py --form loop` runs it in each system's own process.

Imports only torch and transformers: the eager cell must not load lazyxla or JAX, so the
system-specific hooks (step barrier, device wait) come in as arguments.
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch


def _nothing() -> None:
    return None


@dataclass
class LoopTiming:
    """One decode loop call: all ids on the CPU ([B, P + tokens]), seconds to the end of the
    prefill (waited for on the device) and seconds to the final read."""
    ids: torch.Tensor
    prefill_s: float
    total_s: float

    @property
    def decode_s(self) -> float:
        return max(self.total_s - self.prefill_s, 1e-9)


class TorchDecodeLoop:
    """Greedy decoding of a Hugging Face causal LM in the loop form.

    `barrier` ends each token's step (lazyxla: `lx.sync`, so each token is one device graph
    and pending work never grows across tokens); `wait` blocks until the device is idle
    (lazyxla: `lx.wait_device_ops`), used only to time the prefill apart. Both default to
    nothing, which is eager's loop. `forward` replaces the model's call (a compiled forward);
    `compile_step` wraps the whole step instead (model call, argmax, next position)."""

    def __init__(self, model: torch.nn.Module, device: torch.device, *,
                 barrier: Callable[[], None] = _nothing, wait: Callable[[], None] = _nothing,
                 forward: Optional[Callable] = None,
                 compile_step: Optional[Callable[[Callable], Callable]] = None) -> None:
        from transformers import StaticCache   # deferred: transformers loads in a second or more
        self._static_cache = StaticCache
        self.model, self.device = model, device
        self.barrier, self.wait = barrier, wait
        # a compiled forward (torch.compile(model.forward, ...)) is passed in; eager calls the module
        self.forward = forward or model
        params = inspect.signature(model.forward).parameters
        # transformers renamed past_key_values to cache (5.x, the old name is deprecated); older
        # releases take cache_position, newer ones keep the position inside the cache
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._cache_position = "cache_position" in params
        # the whole step (model call, argmax, next position) under one compiler, e.g.
        # torch.compile(..., backend="lazyxla"): the step's own small ops are captured too
        self.step = compile_step(self._step) if compile_step else self._step

    def _call(self, tokens: torch.Tensor, cache, positions: torch.Tensor) -> torch.Tensor:
        kw = {self._cache_kw: cache, "position_ids": positions, "use_cache": True, "logits_to_keep": 1}
        if self._cache_position:
            kw["cache_position"] = positions[0]
        logits = self.forward(input_ids=tokens, **kw).logits
        # argmax on the device: the token is fed back without a host read
        return logits[:, -1].argmax(-1, keepdim=True)

    def _step(self, tokens: torch.Tensor, cache, positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The greedy token after `tokens` at `positions` ([1, T]) and the next position ([1, 1])."""
        return self._call(tokens, cache, positions), positions[:, -1:] + 1

    def run(self, ids: torch.Tensor, new_tokens: int) -> LoopTiming:
        """`new_tokens` greedy tokens after prompt `ids` ([B, P] int64 on the CPU)."""
        length = ids.shape[1]
        start = time.perf_counter()
        with torch.no_grad():
            cache = self._static_cache(config=self.model.config, max_cache_len=length + new_tokens)
            positions = torch.arange(length, device=self.device)[None]
            # the next position is a device tensor, advanced on the device: each decode step has
            # the same inputs' shapes and no host scalar, so it traces (and compiles) once
            token, position = self.step(ids.to(self.device), cache, positions)
            out = [token]
            self.barrier()
            self.wait()
            prefill = time.perf_counter() - start
            for _ in range(new_tokens - 1):
                token, position = self.step(token, cache, position)
                out.append(token)
                self.barrier()
            new = torch.cat(out, dim=1).cpu()    # the only host read
        return LoopTiming(torch.cat([ids, new], dim=1), prefill, time.perf_counter() - start)
