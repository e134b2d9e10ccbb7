"""Orthogonal polynomials of a per-element degree n: Chebyshev T, U, V, W (plain and
shifted to [0, 1]), Hermite H and He, Laguerre L, Legendre P.

Eager's kernels (aten/src/ATen/native/Math.h) are reproduced branch by branch, since
their values differ from the textbook polynomial where they take shortcuts: 0 for
n < 0, exact values at the interval's ends, a trigonometric closed form for large n
inside (-1, 1) (Chebyshev), NaN beyond n = 128 (float32) / 512 (float64) for Hermite,
and otherwise the three-term recurrence in the input's dtype, stopped early once it
turns NaN. The recurrence is one `lax.while_loop` whose trip count is the largest
degree that needs it; each element stops at its own degree. n arrives promoted to
x's floating dtype and is truncated to an integer, as eager's cast does (NaN and inf
count as negative: Hermite H says so, and the others' undefined cast gives INT64_MIN
on x86).

A shifted polynomial is the plain one at y = 2x - 1 (eager's expressions are the
plain ones written out in y), except for the degree above which the closed form is
used.
"""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import as_compute, exact_div
from .registry import register

aten = torch.ops.aten


def _recurrence(step, p, q, first: int, last):
    """q_k = step(k, q_{k-2}, q_{k-1}) for k = first..last (per element), from (p, q);
    an element stops where its q is NaN (eager's loops test that; NaN would stay NaN)."""
    def running(k, q):
        return (k <= last) & ~jnp.isnan(q)

    def body(state):
        k, p, q = state
        on = running(k, q)
        r = step(k, p, q)
        return k + 1, jnp.where(on, q, p), jnp.where(on, r, q)

    start = (jnp.asarray(first, jnp.int64), p, q)
    return lax.while_loop(lambda s: jnp.any(running(s[0], s[2])), body, start)[2]


def _as_float(k, like):
    """An integer expression converted to the computing dtype, as C++ converts it."""
    return k.astype(like.dtype)


def _fused(a, q, c, k1=None):
    """(a * q - c) / k1 rounded as eager's loop rounds it, or a * q - c if no k1.
    Eager's CPU kernels are compiled with FMA contraction and round fma(a, q, -c);
    XLA contracts too but may pick the other product, and turns the division by a
    loop scalar into a multiplication by its reciprocal: in float32 either drifts
    past the tolerance within a few hundred steps (Laguerre, Legendre). The float32
    fma goes through float64, where a * q is exact; a float64 input keeps XLA's
    contraction (drift ~1e-16 per step)."""
    if a.dtype == jnp.float32:
        wide = jnp.float64
        r = (a.astype(wide) * q.astype(wide) - c.astype(wide)).astype(a.dtype)
    else:
        r = a * q - c
    return r if k1 is None else exact_div(r, _as_float(k1, r))


def _degree(n, dt):
    n = n.astype(dt)
    return jnp.where(jnp.isfinite(n), n, -1).astype(jnp.int64)


def _select(n, branches, default):
    """The first branch (condition, value) that holds, else `default`; 0 for n < 0."""
    out = default
    for cond, value in reversed(branches):
        out = jnp.where(cond, value, out)
    return jnp.where(n < 0, 0.0, out)


def _chebyshev(kind: str, y, n, closed_above: int):
    """T, U, V or W of degree n at y, eager's way."""
    one = jnp.ones_like(y)
    nf, n1, n2 = _as_float(n, y), _as_float(n + 1, y), _as_float(n + n + 1, y)
    even = n % 2 == 0
    if kind == "t":
        end = jnp.where((y > 0) | even, one, -one)
    elif kind == "u":
        end = jnp.where((y > 0) | even, n1, -n1)
    elif kind == "v":
        end = jnp.where(y > 0, one, jnp.where(even, n2, -n2))
    else:
        end = jnp.where(y > 0, n2, jnp.where(even, one, -one))
    # in float32, an ulp of acos between XLA's and glibc's acosf (neither is always
    # correctly rounded) times n / cos(theta/2) can reach 1e-3 for V near y = -1 with
    # n ~ 500: about 1 in 10^4 such elements differ from eager beyond the tolerance
    theta = jnp.arccos(y)
    if kind == "t":
        closed = jnp.cos(nf * theta)
    elif kind == "u":
        closed = jnp.where(jnp.sin(theta) != 0, jnp.sin(n1 * theta) / jnp.sin(theta),
                           n1 * jnp.cos(n1 * theta) / y)
    elif kind == "v":
        closed = jnp.where(jnp.sin(theta / 2) != 1, jnp.cos((nf + 0.5) * theta) / jnp.cos(theta / 2),
                           jnp.where(even, n2, -n2))
    else:
        closed = jnp.where(jnp.cos(theta / 2) != 1, jnp.sin((nf + 0.5) * theta) / jnp.sin(theta / 2), end)
    q1 = {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[kind]
    use_closed = (n > closed_above) & (jnp.abs(y) < 1)
    plain = (jnp.abs(y) != 1) & ~use_closed & (n >= 2)
    rec = _recurrence(lambda k, p, q: (y + y) * q - p, one, q1, 2, jnp.where(plain, n, 0))
    return _select(n, [(jnp.abs(y) == 1, end), (use_closed, closed), (n == 0, one), (n == 1, q1)], rec)


def _legendre(x, n):
    one = jnp.ones_like(x)
    plain = (jnp.abs(x) != 1) & (n >= 2)
    rec = _recurrence(lambda k, p, q: _fused(_as_float(k + k + 1, x) * x, q, _as_float(k, x) * p, k + 1),
                      one, x, 1, jnp.where(plain, n - 1, 0))
    end = jnp.where((x > 0) | (n % 2 == 0), one, -one)
    return _select(n, [(jnp.abs(x) == 1, end), (n == 0, one), (n == 1, x)], rec)


def _laguerre(x, n):
    one = jnp.ones_like(x)
    plain = (x != 0) & (n >= 2)
    rec = _recurrence(lambda k, p, q: _fused(_as_float(k + k, x) + (1.0 - x), q, _as_float(k, x) * p, k + 1),
                      one, 1.0 - x, 1, jnp.where(plain, n - 1, 0))
    return _select(n, [(x == 0, one), (n == 0, one), (n == 1, 1.0 - x)], rec)


def _hermite(x, n, physicists: bool):
    """H (physicists') or He (probabilists'); NaN beyond eager's degree limit."""
    one = jnp.ones_like(x)
    limit = 128 if x.dtype == jnp.float32 else 512
    q1 = x + x if physicists else x
    plain = (n >= 2) & (n <= limit)
    if physicists:  # eager steps k = 2, 4, .. < 2n: here k/2 = 1 .. n-1
        step = lambda j, p, q: _fused(x + x, q, _as_float(j + j, x) * p)  # noqa: E731
    else:
        step = lambda k, p, q: _fused(x, q, _as_float(k, x) * p)  # noqa: E731
    rec = _recurrence(step, one, q1, 1, jnp.where(plain, n - 1, 0))
    return _select(n, [(n == 0, one), (n == 1, q1), (n > limit, jnp.nan)], rec)


def _rule(poly):
    def rule(ctx, x, n):
        x, n = jnp.broadcast_arrays(*as_compute(ctx, x, n))
        return poly(x, _degree(n, x.dtype))
    return rule


def _shifted(kind: str, closed_above: int):
    return lambda x, n: _chebyshev(kind, x + x - 1.0, n, closed_above)


def _plain(kind: str, closed_above: int):
    return lambda x, n: _chebyshev(kind, x, n, closed_above)


_POLYNOMIALS = {
    aten.special_chebyshev_polynomial_t: _plain("t", 6),
    aten.special_chebyshev_polynomial_u: _plain("u", 8),
    aten.special_chebyshev_polynomial_v: _plain("v", 8),
    aten.special_chebyshev_polynomial_w: _plain("w", 8),
    aten.special_shifted_chebyshev_polynomial_t: _shifted("t", 6),
    aten.special_shifted_chebyshev_polynomial_u: _shifted("u", 6),
    aten.special_shifted_chebyshev_polynomial_v: _shifted("v", 6),
    aten.special_shifted_chebyshev_polynomial_w: _shifted("w", 4),
    aten.special_legendre_polynomial_p: _legendre,
    aten.special_laguerre_polynomial_l: _laguerre,
    aten.special_hermite_polynomial_h: lambda x, n: _hermite(x, n, True),
    aten.special_hermite_polynomial_he: lambda x, n: _hermite(x, n, False),
}
for _packet, _poly in _POLYNOMIALS.items():
    # x_scalar / n_scalar: eager wraps the Python number as a 0-d tensor, so one rule serves
    register(_packet.default, _packet.x_scalar, _packet.n_scalar)(_rule(_poly))
