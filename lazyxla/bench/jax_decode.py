"""The JAX limit of greedy decoding: a Hugging Face GPT-2 or Llama written directly in JAX
over the same weights, one `jax.jit` step with a static KV cache donated, the next token
fed back on the device (no host read until the end). What a decode loop costs with zero
runtime overhead; `lazyxla/bench/generate.py` runs it beside eager, lazyxla and PyTorch/XLA.

Imports only torch (for the weights), numpy and JAX, never lazyxla.
"""
from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch


def _weights(model: torch.nn.Module) -> dict:
    return {k: jnp.asarray(v.detach().float().numpy()) for k, v in model.state_dict().items()}


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _rms_norm(x, w, eps):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _attend(q, k_cache, v_cache, start):
    """q [B, H, T, hd] at positions start..start+T-1 against the whole cache [B, KV, S, hd];
    cache slots after each query's position are masked."""
    heads, kv = q.shape[1], k_cache.shape[1]
    k = jnp.repeat(k_cache, heads // kv, axis=1)
    v = jnp.repeat(v_cache, heads // kv, axis=1)
    scores = jnp.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(q.shape[-1])
    allowed = jnp.arange(k.shape[2])[None, :] <= (start + jnp.arange(q.shape[2]))[:, None]
    scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
    return jnp.einsum("bhts,bhsd->bhtd", jax.nn.softmax(scores, axis=-1), v)


def _heads(x, n):
    b, t, _ = x.shape
    return x.reshape(b, t, n, -1).transpose(0, 2, 1, 3)


def _merge(x):
    b, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def _write(cache, layer, new, start):
    return jax.lax.dynamic_update_slice(cache, new[None], (layer, 0, 0, start, 0))


def _gpt2_step(cfg, w, cache, tokens, start):
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
    logits = x[:, -1] @ w["transformer.wte.weight"].T
    return jnp.argmax(logits, axis=-1)[:, None].astype(tokens.dtype), (k_cache, v_cache)


def _rope(x, positions, theta):
    half = x.shape[-1] // 2
    inv = 1.0 / theta ** (jnp.arange(0, half, dtype=jnp.float32) / half)
    freqs = positions[:, None].astype(jnp.float32) * inv[None]
    cos, sin = jnp.cos(jnp.concatenate([freqs] * 2, -1)), jnp.sin(jnp.concatenate([freqs] * 2, -1))
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def _llama_step(cfg, w, cache, tokens, start):
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
    return jnp.argmax(x[:, -1] @ head.T, axis=-1)[:, None].astype(tokens.dtype), (k_cache, v_cache)


def _cache_shape(cfg, batch: int, length: int) -> tuple:
    if cfg.model_type == "gpt2":
        return (cfg.n_layer, batch, cfg.n_head, length, cfg.n_embd // cfg.n_head)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, length, head_dim)


class Decoder:
    """Greedy decoding of `model`'s weights in JAX. The first `generate` call converts the
    weights and compiles (prefill and decode step), as the other systems' first calls do;
    later calls of the same shapes reuse both."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.config = model.config
        body = {"gpt2": _gpt2_step, "llama": _llama_step}.get(self.config.model_type)
        if body is None:
            raise ValueError(f"no JAX decode step for model type {self.config.model_type!r}; "
                             "gpt2 and llama have one")
        self.model, self.weights = model, None
        self.step = jax.jit(functools.partial(body, self.config), donate_argnums=(1,))

    def generate(self, ids: torch.Tensor, new_tokens: int) -> tuple:
        """`new_tokens` after prompt `ids` ([B, P] int64): (all ids as a CPU tensor, seconds)."""
        start_time = time.perf_counter()
        if self.weights is None:
            self.weights = _weights(self.model)
        shape = _cache_shape(self.config, ids.shape[0], ids.shape[1] + new_tokens)
        cache = (jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))
        token, cache = self.step(self.weights, cache, jnp.asarray(ids.numpy().astype(np.int32)), jnp.int32(0))
        out = [token]
        for i in range(new_tokens - 1):
            token, cache = self.step(self.weights, cache, token, jnp.int32(ids.shape[1] + i))
            out.append(token)
        new = np.asarray(jnp.concatenate(out, axis=1))
        return torch.cat([ids, torch.from_numpy(new.astype(np.int64))], dim=1), time.perf_counter() - start_time
