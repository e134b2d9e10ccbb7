"""Random number generation. Each call carries a fresh seed drawn from PyTorch's
default generator (frontend/handlers.py) as a runtime operand, so values are
reproducible under torch.manual_seed and never recompile. The streams are
JAX's (threefry), not PyTorch's: values differ from eager CPU, distributions
match."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..errors import StorageRangeError
from .registry import register

aten = torch.ops.aten


def _key(seed):
    # the seed's 32 bits (frontend/handlers.py draw_seed), whether it arrives as int64 or int32
    return jax.random.key(seed.astype(jnp.uint32), impl="threefry2x32")


def _float(ctx):
    return ctx.jdtype if jnp.issubdtype(ctx.jdtype, jnp.floating) else jnp.float32


def _parts(draw, ctx, seed):
    """`draw(key, shape, real dtype)` for a real output; for a complex one, as eager
    does, independent draws for the real and the imaginary part (the same law)."""
    if not jnp.issubdtype(ctx.jdtype, jnp.complexfloating):
        return draw(_key(seed), ctx.shape, _float(ctx))
    both = draw(_key(seed), (2,) + tuple(ctx.shape), jnp.finfo(ctx.jdtype).dtype)
    return lax.complex(both[0], both[1])


def _std_normal(ctx):
    """Eager's complex normals have variance 1/2 per part (|z|^2 has mean 1)."""
    return math.sqrt(0.5) if jnp.issubdtype(ctx.jdtype, jnp.complexfloating) else 1.0


@register(aten.normal_.default)
def _normal(ctx, x, mean=0.0, std=1.0, *, seed):
    z = _parts(jax.random.normal, ctx, seed) * (std * _std_normal(ctx))
    # eager: the mean on both parts; a Python complex keeps z's dtype (lax.complex of two
    # Python floats is a complex128 constant, whose convert aborts the TPU's compiler)
    return z + complex(mean, mean) if jnp.iscomplexobj(z) else z + mean


@register(aten.rand_like.default)
def _rand_like(ctx, x, *, seed, **kwargs):
    return _parts(jax.random.uniform, ctx, seed)


@register(aten.randn_like.default)
def _randn_like(ctx, x, *, seed, **kwargs):
    return _parts(jax.random.normal, ctx, seed) * _std_normal(ctx)


@register(aten.randint_like.default)
def _randint_like(ctx, x, high, *, seed, **kwargs):
    return _randint(ctx, seed, 0, high)


@register(aten.randint_like.low_dtype)
def _randint_like_low(ctx, x, low, high, *, seed, **kwargs):
    return _randint(ctx, seed, low, high)


@register(aten.uniform_.default)
def _uniform(ctx, x, low=0.0, high=1.0, *, seed):
    return _parts(lambda key, shape, dt: jax.random.uniform(key, shape, dt, jnp.asarray(low, dt), jnp.asarray(high, dt)),
                  ctx, seed)


@register(aten.bernoulli_.float, aten.bernoulli.p)
def _bernoulli_p(ctx, x, p=0.5, *, seed):
    return jax.random.uniform(_key(seed), ctx.shape, jnp.float32) < p


@register(aten.bernoulli_.Tensor)
def _bernoulli_t(ctx, x, p, *, seed):
    return jax.random.uniform(_key(seed), ctx.shape, jnp.float32) < jnp.broadcast_to(p, ctx.shape)


@register(aten.bernoulli.default)
def _bernoulli(ctx, p, *, seed):
    return jax.random.uniform(_key(seed), ctx.shape, jnp.float32) < p


@register(aten.exponential_.default)
def _exponential(ctx, x, lambd=1.0, *, seed):
    return jax.random.exponential(_key(seed), ctx.shape, _float(ctx)) / lambd


def _randint(ctx, seed, low, high):
    if _narrowed(ctx) and not (-2**31 <= low and high <= 2**31):
        raise StorageRangeError(
            f"lazyxla: random_({low}, {high}) on a torch.int64 tensor draws values that torch.int32 "
            "cannot hold, and the storage dtype policy holds torch.int64 as torch.int32 (the TPU's "
            "64-bit rule). Keep 64-bit integers with LAZYXLA_STORAGE_DTYPES=none or "
            "lx.set_storage_dtypes(None) (docs/design.md, '64-bit types on the TPU').")
    return jax.random.randint(_key(seed), ctx.shape, low, high, jnp.int64)


def _narrowed(ctx) -> bool:
    """Whether the result is an int64 tensor held as int32 (the TPU's 64-bit rule)."""
    return ctx.dtype == torch.int64 and ctx.jdtype == jnp.int32


def _int64_top(ctx) -> int:
    """The exclusive top of an int64 `random_()` without bounds: 2**63 - 1 as eager's, or
    int32's whole non-negative range where int64 is held as int32 (never wrapped)."""
    return 2 ** 31 if _narrowed(ctx) else 2 ** 63 - 1


@register(getattr(aten.random_, "from"))
def _random_from(ctx, x, low, high=None, *, seed):
    if high is None:
        high = _int64_top(ctx) if ctx.dtype == torch.int64 else 2 ** (torch.finfo(ctx.dtype).nmant + 1)
    return _randint(ctx, seed, low, high)


@register(aten.random_.to)
def _random_to(ctx, x, high, *, seed):
    return _randint(ctx, seed, 0, high)


@register(aten.random_.default)
def _random(ctx, x, *, seed):
    if ctx.dtype == torch.bool:
        return _randint(ctx, seed, 0, 2)
    high = _int64_top(ctx) if ctx.dtype == torch.int64 else (
        int(torch.iinfo(ctx.dtype).max) + 1 if not ctx.dtype.is_floating_point
        else 2 ** (torch.finfo(ctx.dtype).nmant + 1) + 1)
    return _randint(ctx, seed, 0, high)


@register(aten.multinomial.default)
def _multinomial(ctx, probs, num_samples, replacement=False, *, seed):
    # rows of unnormalised weights; a zero weight is log 0 = -inf and never drawn
    logits = jnp.log(probs.astype(jnp.float32))
    key = _key(seed)
    if replacement:
        draws = jax.random.categorical(key, logits, shape=(num_samples,) + logits.shape[:-1])
        return jnp.moveaxis(draws, 0, -1).astype(jnp.int64)
    # without replacement: the Gumbel top-k trick draws the first `num_samples` of a
    # weighted random order, which is sequential draws without replacement in law
    keys = logits + jax.random.gumbel(key, logits.shape, jnp.float32)
    return lax.top_k(keys, num_samples)[1].astype(jnp.int64)
