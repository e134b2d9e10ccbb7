"""Matrix decompositions: SVD, symmetric eigendecomposition, QR, Cholesky, LU.

JAX's CPU backend calls the same LAPACK routines eager CPU does (gesdd, syevd,
geqrf/orgqr, potrf, getrf), so factors agree with eager up to rounding, signs
included in practice. Where a decomposition is not unique (singular vectors), the
OpInfo tests compare unique functions of it, as PyTorch's own tests do.

`info` outputs follow LAPACK's convention as eager reports it: 0 on success, else
the (1-based) order of the failing leading minor (Cholesky) or zero pivot (LU).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ._util import jax_algorithm
from .registry import register

aten = torch.ops.aten


def mT(x):
    return jnp.swapaxes(x, -1, -2)


def mH(x):
    return jnp.conj(mT(x))


def empty(ctx, i: int):
    """Output `i` that the call asked not to compute: eager returns it empty."""
    return jnp.zeros(ctx.shape[i], ctx.jdtype[i])


@register(aten._linalg_svd.default)
@jax_algorithm
def _svd(ctx, a, full_matrices=False, compute_uv=True, *, driver=None):
    if not compute_uv:
        return empty(ctx, 0), jnp.linalg.svd(a, compute_uv=False), empty(ctx, 2)
    u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


@register(aten._linalg_eigh.default)
def _eigh(ctx, a, UPLO="L", compute_v=True):
    # lax's eigh reads one triangle like LAPACK's syevd (no symmetrisation, as eager)
    v, w = lax.linalg.eigh(a, lower=UPLO == "L", symmetrize_input=False)
    return w, (v if compute_v else empty(ctx, 1))


@register(aten.linalg_eig.default)
def _eig(ctx, a):
    # LAPACK's geev on both sides (jnp.linalg.eig is CPU-only in JAX): unit-norm
    # eigenvectors; the phase is not unique, which eager's own tests allow for
    w, v = jnp.linalg.eig(a)
    return w, v


@register(aten.linalg_qr.default)
@jax_algorithm
def _qr(ctx, a, mode="reduced"):
    if mode == "r":
        return empty(ctx, 0), jnp.linalg.qr(a, mode="r")
    q, r = jnp.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    return q, r


@register(aten.linalg_householder_product.default, aten.orgqr.default)
def _householder_product(ctx, a, tau):
    return lax.linalg.householder_product(a, tau)


@register(aten.geqrf.default)
@jax_algorithm
def _geqrf(ctx, a):
    # LAPACK's geqrf itself (R on and above the diagonal, the reflectors below, their
    # taus); numpy's "raw" mode hands the packed matrix back transposed
    packed, tau = jnp.linalg.qr(a, mode="raw")
    return mT(packed), tau


@register(aten.ormqr.default)
def _ormqr(ctx, a, tau, c, left=True, transpose=False):
    # LAPACK's ormqr/unmqr: op(Q) @ C or C @ op(Q), op the conjugate transpose if asked
    return lax.linalg.ormqr(a, tau, c, left=left, transpose=transpose)


# -- Cholesky ---------------------------------------------------------------------------

def _first_bad_minor(a):
    """1-based order of the first leading minor of `a` (one matrix, lower triangle read)
    that is not positive-definite: an unblocked Cholesky that tracks its pivots. Only
    run when LAPACK's factorisation failed (JAX then returns NaNs, not potrf's info)."""
    n = a.shape[-1]
    if n == 0:
        return jnp.int32(0)
    idx = jnp.arange(n)

    def step(j, state):
        low, bad = state
        row = jnp.where(idx < j, low[j], 0)
        pivot = a[j, j] - jnp.sum(row * jnp.conj(row)).real
        ok = pivot > 0
        bad = jnp.where((bad == 0) & ~ok, j + 1, bad)
        diag = jnp.sqrt(jnp.where(ok, pivot, 1))
        col = (a[:, j] - low @ jnp.conj(row)) / diag
        low = low.at[:, j].set(jnp.where(idx > j, col, jnp.where(idx == j, diag, 0)))
        return low, bad

    return lax.fori_loop(0, n, step, (jnp.zeros_like(a), jnp.int32(0)))[1]


def cholesky_with_info(a, upper: bool):
    """(factor, info) as linalg_cholesky_ex gives them; reads the lower triangle
    (upper=False) or the upper one, as LAPACK does."""
    src = mH(a) if upper else a
    low = lax.linalg.cholesky(src, symmetrize_input=False)
    failed = jnp.any(jnp.isnan(low), axis=(-2, -1))
    batch = src.shape[:-2]
    flat = src.reshape((math.prod(batch),) + src.shape[-2:])
    info = lax.cond(jnp.any(failed), lambda m: jax.vmap(_first_bad_minor)(m),
                    lambda m: jnp.zeros(m.shape[:1], jnp.int32), flat).reshape(batch)
    return (mH(low) if upper else low), info


@register(aten.linalg_cholesky_ex.default)
@jax_algorithm
def _cholesky_ex(ctx, a, *, upper=False, check_errors=False):
    return cholesky_with_info(a, upper)


@register(aten.cholesky.default)
@jax_algorithm
def _cholesky(ctx, a, upper=False):
    # legacy torch.cholesky: eager raises on failure (checked on the host, see
    # _linalg_check_errors); here a failed factor is NaN like the _ex variant's
    return cholesky_with_info(a, upper)[0]


# -- LU ---------------------------------------------------------------------------------

def lu_with_info(a):
    """(LU, 1-based int32 pivots, permutation, info) of getrf, as eager's linalg_lu_factor_ex."""
    lu, piv, perm = lax.linalg.lu(a)
    zero = jnp.diagonal(lu, axis1=-2, axis2=-1) == 0
    if zero.shape[-1] == 0:  # an empty matrix factors fine
        return lu, piv.astype(jnp.int32), perm, jnp.zeros(zero.shape[:-1], jnp.int32)
    info = jnp.where(jnp.any(zero, axis=-1), jnp.argmax(zero, axis=-1) + 1, 0).astype(jnp.int32)
    return lu, (piv + 1).astype(jnp.int32), perm, info


@register(aten.linalg_lu_factor_ex.default)
def _lu_factor_ex(ctx, a, *, pivot=True, check_errors=False):
    if not pivot:
        raise NotImplementedError("lazyxla: LU without pivoting (pivot=False) has no lowering; "
                                  "call it on a CPU tensor")
    lu, piv, _, info = lu_with_info(a)
    return lu, piv, info


def _unpack(lu, perm, m: int, n: int):
    k = min(m, n)
    low = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    up = jnp.triu(lu[..., :k, :])
    # eager's P satisfies A = P @ L @ U: P[perm[i], i] = 1
    p = mT(jax.nn.one_hot(perm, m, dtype=lu.dtype))
    return p, low, up


@register(aten.linalg_lu.default)
def _lu(ctx, a, *, pivot=True):
    if not pivot:
        raise NotImplementedError("lazyxla: LU without pivoting (pivot=False) has no lowering; "
                                  "call it on a CPU tensor")
    lu, _, perm = lax.linalg.lu(a)
    return _unpack(lu, perm, a.shape[-2], a.shape[-1])


def pivots_to_permutation(piv, m: int):
    """eager's 1-based LAPACK pivots -> the row permutation (A[perm] = L @ U)."""
    return lax.linalg.lu_pivots_to_permutation(piv.astype(jnp.int32) - 1, m)


@register(aten.lu_unpack.default)
def _lu_unpack(ctx, lu, piv, unpack_data=True, unpack_pivots=True):
    m, n = lu.shape[-2:]
    p, low, up = _unpack(lu, pivots_to_permutation(piv, m), m, n)
    return (p if unpack_pivots else empty(ctx, 0),
            low if unpack_data else empty(ctx, 1), up if unpack_data else empty(ctx, 2))
