"""The JAX limit of greedy decoding: a Hugging Face GPT-2 or Llama written directly in JAX
over the same weights, one `jax.jit` step with a static KV cache donated, the next token
fed back on the device (no host read until the end). What a decode loop costs with zero
runtime overhead; `lazyxla/bench/generate.py` runs it beside eager, lazyxla and PyTorch/XLA.

The weights keep the model's dtype (float32, or bfloat16 for the bench's 1B Llama), and the
steps follow Hugging Face's own precision rules where they widen (RMSNorm, LayerNorm,
rotary angles and the attention's softmax in float32), so that greedy tokens match eager's
as far as the dtype allows (bfloat16 ties and rounding can still flip a token; the bench
reports how many leading tokens agree).

Imports only torch (for the weights), numpy and JAX, never lazyxla.
"""
from __future__ import annotations

import functools
import time
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import torch


_DTYPES = {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16}


def model_dtype(model: torch.nn.Module):
    """The JAX dtype of `model`'s parameters (float32, bfloat16 or float16)."""
    dtype = next(model.parameters()).dtype
    if dtype not in _DTYPES:
        raise ValueError(f"no JAX decode step for parameters of dtype {dtype}")
    return _DTYPES[dtype]


def _weights(model: torch.nn.Module, dtype) -> dict:
    """The state dict as JAX arrays of `dtype`; a tied weight (lm_head = embeddings) once:
    the steps fall back to the embeddings, and a 1B Llama's vocabulary matrix is 0.5 GB."""
    seen, out = set(), {}
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        out[k] = _array(v.detach(), dtype)
    return out


def _array(t: torch.Tensor, dtype) -> jax.Array:
    """`t` as a JAX array of `dtype`. numpy has no bfloat16: a bfloat16 tensor travels as its
    16-bit pattern and is reinterpreted on the device (exact, and for a 1B model 7 s against
    35 s through a float32 copy converted on the host)."""
    if t.dtype == torch.bfloat16 and dtype == jnp.bfloat16:
        return jax.lax.bitcast_convert_type(jnp.asarray(t.contiguous().view(torch.int16).numpy()), jnp.bfloat16)
    if t.dtype == torch.bfloat16:
        t = t.float()   # exact: every bfloat16 value is a float32 value
    return jnp.asarray(t.numpy(), dtype=dtype)


def _layer_norm(x, w, b, eps):
    # float32 inside, as torch's layer_norm kernels compute for half types
    h = x.astype(jnp.float32)
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    return ((h - mean) * jax.lax.rsqrt(var + eps)).astype(x.dtype) * w + b


def _rms_norm(x, w, eps):
    # Hugging Face's LlamaRMSNorm: float32 inside, back to the input dtype, then the weight
    h = x.astype(jnp.float32)
    return w * (h * jax.lax.rsqrt((h * h).mean(-1, keepdims=True) + eps)).astype(x.dtype)


def _attend(q, k_cache, v_cache, start):
    """q [B, H, T, hd] at positions start..start+T-1 against the whole cache [B, KV, S, hd];
    cache slots after each query's position are masked. Grouped-query heads are grouped in
    the contraction, not repeated: the decode step is a read of the weights and the cache,
    and a repeated cache would be read (and written) KV/H times over. Scores, softmax and
    the accumulation in float32 (as torch's attention kernels accumulate), the result in
    q's dtype."""
    b, heads, t, hd = q.shape
    kv = k_cache.shape[1]
    g = q.reshape(b, kv, heads // kv, t, hd)
    scores = jnp.einsum("bkgtd,bksd->bkgts", g, k_cache, preferred_element_type=jnp.float32) / np.sqrt(hd)
    allowed = jnp.arange(k_cache.shape[2])[None, :] <= (start + jnp.arange(t))[:, None]
    scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v_cache.dtype)
    out = jnp.einsum("bkgts,bksd->bkgtd", probs, v_cache, preferred_element_type=jnp.float32)
    return out.reshape(b, heads, t, hd).astype(q.dtype)


def _heads(x, n):
    b, t, _ = x.shape
    return x.reshape(b, t, n, -1).transpose(0, 2, 1, 3)


def _merge(x):
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def _write(cache, layer, new, start):
    return jax.lax.dynamic_update_slice(cache, new[None], (layer, 0, 0, start, 0))


def _gpt2_logits(cfg, w, cache, tokens, start):
    k_cache, v_cache = cache
    t = tokens.shape[1]
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][start + jnp.arange(t)]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        h = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], cfg.layer_norm_epsilon)
        q, k, v = jnp.split(h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"], 3, axis=-1)
        k_cache = _write(k_cache, i, _heads(k, cfg.n_head), start)
        v_cache = _write(v_cache, i, _heads(v, cfg.n_head), start)
        a = _merge(_attend(_heads(q, cfg.n_head), k_cache[i], v_cache[i], start))
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], cfg.layer_norm_epsilon)
        h = jax.nn.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate=True)
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], cfg.layer_norm_epsilon)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["transformer.wte.weight"]
    return x[:, -1] @ head.T, (k_cache, v_cache)


def _rope(x, positions, theta):
    half = x.shape[-1] // 2
    inv = 1.0 / theta ** (jnp.arange(0, half, dtype=jnp.float32) / half)
    freqs = positions[:, None].astype(jnp.float32) * inv[None]
    # angles in float32, cos and sin then in x's dtype, as Hugging Face's rotary embedding
    cos = jnp.cos(jnp.concatenate([freqs] * 2, -1)).astype(x.dtype)
    sin = jnp.sin(jnp.concatenate([freqs] * 2, -1)).astype(x.dtype)
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def _llama_logits(cfg, w, cache, tokens, start):
    k_cache, v_cache = cache
    t = tokens.shape[1]
    positions = start + jnp.arange(t)
    theta, eps = _rope_theta(cfg), cfg.rms_norm_eps
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    x = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        h = _rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = _rope(_heads(h @ w[p + "self_attn.q_proj.weight"].T, heads), positions, theta)
        k = _rope(_heads(h @ w[p + "self_attn.k_proj.weight"].T, kv), positions, theta)
        v = _heads(h @ w[p + "self_attn.v_proj.weight"].T, kv)
        k_cache, v_cache = _write(k_cache, i, k, start), _write(v_cache, i, v, start)
        x = x + _merge(_attend(q, k_cache[i], v_cache[i], start)) @ w[p + "self_attn.o_proj.weight"].T
        h = _rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = jax.nn.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + gate @ w[p + "mlp.down_proj.weight"].T
    x = _rms_norm(x, w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return x[:, -1] @ head.T, (k_cache, v_cache)


_LOGITS = {"gpt2": _gpt2_logits, "llama": _llama_logits}


def _greedy_step(body, cfg, w, cache, tokens, start):
    """One step: the last position's logits, their argmax ([B, 1], on the device), the cache."""
    logits, cache = body(cfg, w, cache, tokens, start)
    return jnp.argmax(logits, axis=-1)[:, None].astype(tokens.dtype), cache


def _cache_shape(cfg, batch: int, length: int) -> tuple:
    if cfg.model_type == "gpt2":
        return (cfg.n_layer, batch, cfg.n_head, length, cfg.n_embd // cfg.n_head)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, length, head_dim)


class Decoder:
    """Greedy decoding of `model`'s weights in JAX, in the model's dtype. The first call
    converts the weights and compiles (prefill and decode step), as the other systems' first
    calls do; later calls of the same shapes reuse both."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.config = model.config
        body = _LOGITS.get(self.config.model_type)
        if body is None:
            raise ValueError(f"no JAX decode step for model type {self.config.model_type!r}; "
                             "gpt2 and llama have one")
        self.model, self.weights, self.dtype = model, None, model_dtype(model)
        self.body = body
        self.step = jax.jit(functools.partial(_greedy_step, body, self.config), donate_argnums=(1,))

    def compiles(self) -> int:
        """Compiles so far: jax.jit's cache holds one executable per shape (prefill, decode step)."""
        size = getattr(self.step, "_cache_size", None)   # a private jax.jit method: 0 where it is gone
        return size() if size else 0

    def run(self, ids: torch.Tensor, new_tokens: int) -> Tuple[torch.Tensor, float, float]:
        """`new_tokens` after prompt `ids` ([B, P] int64): (all ids as a CPU tensor, seconds to
        the end of the prefill (waited for), seconds to the final read)."""
        start_time = time.perf_counter()
        if self.weights is None:
            self.weights = _weights(self.model, self.dtype)
        shape = _cache_shape(self.config, ids.shape[0], ids.shape[1] + new_tokens)
        cache = (jnp.zeros(shape, self.dtype), jnp.zeros(shape, self.dtype))
        token, cache = self.step(self.weights, cache, jnp.asarray(ids.numpy().astype(np.int32)), jnp.int32(0))
        token.block_until_ready()   # only to time the prefill apart, as the PyTorch loop waits
        prefill = time.perf_counter() - start_time
        out = [token]
        for i in range(new_tokens - 1):
            token, cache = self.step(self.weights, cache, token, jnp.int32(ids.shape[1] + i))
            out.append(token)
        new = np.asarray(jnp.concatenate(out, axis=1))   # the only host read
        all_ids = torch.cat([ids, torch.from_numpy(new.astype(np.int64))], dim=1)
        return all_ids, prefill, time.perf_counter() - start_time

    def generate(self, ids: torch.Tensor, new_tokens: int) -> Tuple[torch.Tensor, float]:
        """`new_tokens` after prompt `ids` ([B, P] int64): (all ids as a CPU tensor, seconds)."""
        all_ids, _, seconds = self.run(ids, new_tokens)
        return all_ids, seconds

    def prefill_logits(self, ids: torch.Tensor) -> np.ndarray:
        """The prompt's last-position logits ([B, V], float32): a check of the step's numerics
        against the model's own forward, apart from greedy's ties."""
        if self.weights is None:
            self.weights = _weights(self.model, self.dtype)
        shape = _cache_shape(self.config, ids.shape[0], ids.shape[1])
        cache = (jnp.zeros(shape, self.dtype), jnp.zeros(shape, self.dtype))
        logits, _ = jax.jit(functools.partial(self.body, self.config))(
            self.weights, cache, jnp.asarray(ids.numpy().astype(np.int32)), jnp.int32(0))
        return np.asarray(logits.astype(jnp.float32))
