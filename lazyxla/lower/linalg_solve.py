"""Linear solves, inverses, determinants, least squares, matrix exponential.

Solves go through the same factorisations eager uses on CPU (getrf for general
matrices, potrf for Cholesky, trsm for triangular ones), so results and the
LU / pivots / info side outputs match eager's. Batch dimensions broadcast as in
eager; lax's triangular solve wants equal batch shapes, so operands are broadcast
first.

Error checks: eager's `torch.linalg.inv(A)` & co. read the LAPACK `info` on the
host and raise for a singular matrix. `_linalg_check_errors` below does the same:
it reads `info` (a partial sync, like eager CUDA's device-to-host read for the
same check) and raises eager's error. The `_ex` variants never check.
"""
from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import torch
from jax import lax

from ._util import jax_algorithm, opmath
from .linalg_decomp import cholesky_with_info, empty, lu_with_info, mH, mT, pivots_to_permutation
from .registry import register

aten = torch.ops.aten


def _broadcast_batch(a, b):
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:])


def triangular(a, b, *, left: bool, lower: bool, trans: bool = False, conj: bool = False,
               unit: bool = False):
    """Solve op(a) x = b (left) or x op(a) = b, op = transpose / adjoint per trans / conj."""
    a, b = _broadcast_batch(a, b)
    return lax.linalg.triangular_solve(a, b, left_side=left, lower=lower, transpose_a=trans,
                                       conjugate_a=conj, unit_diagonal=unit)


def lu_solve(lu, perm, b, trans: bool = False, conj: bool = False):
    """Solve A x = b, A^T x = b (trans) or A^H x = b (trans, conj) for b of shape
    (*, n, k), A[perm] = L @ U."""
    lu, b = _broadcast_batch(lu, b)
    perm = jnp.broadcast_to(perm, lu.shape[:-1])
    if not trans:
        x = jnp.take_along_axis(b, perm[..., None], axis=-2)
        x = triangular(lu, x, left=True, lower=True, unit=True)
        return triangular(lu, x, left=True, lower=False)
    # A^T = U^T L^T P: solve U^T w = b, L^T z = w, then x[perm] = z
    w = triangular(lu, b, left=True, lower=False, trans=True, conj=conj)
    z = triangular(lu, w, left=True, lower=True, trans=True, conj=conj, unit=True)
    inverse = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(z, inverse[..., None], axis=-2)


def _is_vector_rhs(a, b) -> bool:
    # eager's linalg_solve rule: B is a (batch of) vector(s) when it is 1-d or its shape
    # is A's without the last dimension
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])


@register(aten._linalg_solve_ex.default)
def _solve_ex(ctx, a, b, *, left=True, check_errors=False):
    vector = _is_vector_rhs(a, b)
    rhs = b[..., None] if vector else b
    lu, piv, perm, info = lu_with_info(a)  # of A for left=False too, as eager's
    if left:
        x = lu_solve(lu, perm, rhs)
    else:  # X A = B  <=>  A^T X^T = B^T
        x = mT(lu_solve(lu, perm, mT(rhs), trans=True))
    return (x[..., 0] if vector else x), lu, piv, info


@register(aten.linalg_inv_ex.default)
def _inv_ex(ctx, a, *, check_errors=False):
    lu, _, perm, info = lu_with_info(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return lu_solve(lu, perm, eye), info


@register(aten.linalg_lu_solve.default)
def _lu_solve(ctx, lu, piv, b, *, left=True, adjoint=False):
    perm = pivots_to_permutation(piv, lu.shape[-1])
    if left:
        return lu_solve(lu, perm, b, trans=adjoint, conj=adjoint)
    # X A = B  <=>  A^H X^H = B^H (adjoint=False); X A^H = B  <=>  A X^H = B^H
    return mH(lu_solve(lu, perm, mH(b), trans=not adjoint, conj=not adjoint))


def _det_parts(lu, piv):
    diag = jnp.diagonal(lu, axis1=-2, axis2=-1)
    swaps = jnp.sum(piv != jnp.arange(1, piv.shape[-1] + 1, dtype=piv.dtype), axis=-1)
    parity = jnp.where(swaps % 2 == 1, -1, 1).astype(lu.dtype)
    return diag, parity


# eager's det / slogdet factor A^T (A's memory read column-major): their LU and pivots
# outputs, which the backward formulas reuse, are those of A^T, and so are these
@register(aten._linalg_det.default)
def _det(ctx, a):
    lu, piv, _, _ = lu_with_info(mT(a))
    diag, parity = _det_parts(lu, piv)
    return parity * jnp.prod(diag, axis=-1), lu, piv


@register(aten._linalg_slogdet.default)
def _slogdet(ctx, a):
    lu, piv, _, _ = lu_with_info(mT(a))
    diag, parity = _det_parts(lu, piv)
    sign = parity * jnp.prod(jnp.sign(diag), axis=-1)
    return sign, jnp.sum(jnp.log(jnp.abs(diag)), axis=-1), lu, piv


@register(aten.triangular_solve.default)
def _triangular_solve(ctx, b, a, upper=True, transpose=False, unitriangular=False):
    x = triangular(a, b, left=True, lower=not upper, trans=transpose, unit=unitriangular)
    return x, jnp.broadcast_to(a, ctx.shape[1])


@register(aten.linalg_solve_triangular.default)
def _solve_triangular(ctx, a, b, *, upper, left=True, unitriangular=False):
    return triangular(a, b, left=left, lower=not upper, unit=unitriangular)


@register(aten.cholesky_solve.default, aten._cholesky_solve_helper.default)
def _cholesky_solve(ctx, b, factor, upper=False):
    # A = L L^H (or U^H U): solve with the factor, then with its adjoint
    low = mH(factor) if upper else factor
    y = triangular(low, b, left=True, lower=True)
    return triangular(low, y, left=True, lower=True, trans=True, conj=True)


@register(aten.cholesky_inverse.default)
def _cholesky_inverse(ctx, factor, upper=False):
    eye = jnp.broadcast_to(jnp.eye(factor.shape[-1], dtype=factor.dtype), factor.shape)
    return _cholesky_solve(ctx, eye, factor, upper)


@register(aten.linalg_matrix_exp.default)
@jax_algorithm
def _matrix_exp(ctx, a):
    # jax's Pade approximant takes no bf16/f16; eager's accumulates in the low type, so
    # float32 is at least as accurate (the interpreter casts the result back)
    return jsl.expm(a.astype(opmath(a.dtype)))


def _singular_cutoff(s, m: int, n: int, atol=None, rtol=None):
    """Singular values above eager's pinv / lstsq tolerance max(atol, rtol * s_max):
    rtol defaults to eps * max(m, n), or to 0 when only a positive atol is given."""
    eps = float(jnp.finfo(s.dtype).eps)
    if rtol is None:
        rtol = eps * max(m, n) if atol is None else jnp.where(jnp.asarray(atol) > 0, 0.0, eps * max(m, n))
    atol = 0.0 if atol is None else atol
    top = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    tol = jnp.maximum(jnp.asarray(atol)[..., None], jnp.asarray(rtol)[..., None] * top)
    return s > tol


def _inverse_values(s, keep):
    return jnp.where(keep, 1 / jnp.where(keep, s, 1), 0)


@register(aten.linalg_pinv.atol_rtol_tensor, aten.linalg_pinv.atol_rtol_float)
@jax_algorithm
def _pinv(ctx, a, *, atol=None, rtol=None, hermitian=False):
    m, n = a.shape[-2:]
    if hermitian:  # eager: eigh, tolerance on |eigenvalues|
        v, w = lax.linalg.eigh(a, lower=True, symmetrize_input=False)
        keep = _singular_cutoff(jnp.abs(w), m, n, atol, rtol)
        return (v * _inverse_values(w, keep)[..., None, :]) @ mH(v)
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    keep = _singular_cutoff(s, m, n, atol, rtol)
    return (mH(vh) * _inverse_values(s, keep)[..., None, :]) @ mH(u)
