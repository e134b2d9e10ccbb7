"""Matrix products and convolutions. Matmuls accumulate in float32 for
float16/bfloat16 inputs (preferred_element_type), as eager CPU does."""
from __future__ import annotations

import jax.numpy as jnp
import torch
from jax import lax

from ._util import binary, cast, opmath, stepwise_rounding, where
from .registry import register

aten = torch.ops.aten


def _mm(ctx, a, b):
    return jnp.matmul(a, b, precision=ctx.precision, preferred_element_type=opmath(ctx.jdtype))


@register(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.mv.default, aten.dot.default)
def _matmul(ctx, a, b):
    return _mm(ctx, a, b)


@register(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def _addmm(ctx, bias, a, b, *, beta=1, alpha=1):
    return _scaled_add(ctx, bias, _mm(ctx, a, b), beta, alpha)


@register(aten.addbmm.default)
def _addbmm(ctx, bias, a, b, *, beta=1, alpha=1):
    prod = _mm(ctx, a, b)   # summed in its own dtype: jnp.sum widens int32 to int64 under x64
    return _scaled_add(ctx, bias, jnp.sum(prod, axis=0, dtype=prod.dtype), beta, alpha)


def _scaled_add(ctx, bias, prod, beta, alpha):
    """beta * bias + alpha * prod with beta and alpha cast to the compute dtype first, as
    eager does: for integer tensors 0.6 truncates to 0 (scaling by 0.6, then casting,
    gave other values). With beta == 0 the bias is ignored, NaN and inf included (as
    PyTorch documents for the whole add-matmul family); beta may be a traced scalar, so
    this is a select, not a Python branch. alpha == 0 gets no such treatment: PyTorch
    promises nothing there and eager's result depends on its BLAS path (shape, dtype)."""
    dt = opmath(ctx.jdtype)
    beta = cast(beta, dt)
    zero = lax.full((), 0, dt)
    scaled_bias = where(lax.eq(beta, zero), zero, binary(lax.mul, cast(bias, dt), beta))
    return binary(lax.add, binary(lax.mul, prod, cast(alpha, dt)), scaled_bias)


def _conv_dims(nd: int):
    spatial = "DHW"[-nd:] if nd <= 3 else None
    return ("NC" + spatial, "OI" + spatial, "NC" + spatial)


@register(aten.convolution.default)
def _convolution(ctx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    nd = x.ndim - 2
    # one value stands for every spatial dim (conv3d(padding="valid") passes [0])
    stride, padding, dilation, output_padding = (
        tuple(v) * nd if len(v) == 1 else tuple(v) for v in (stride, padding, dilation, output_padding))
    dn = lax.conv_dimension_numbers(x.shape, w.shape, _conv_dims(nd))
    dt = opmath(ctx.jdtype)
    if not transposed:
        out = lax.conv_general_dilated(
            x, w, window_strides=tuple(stride), padding=[(p, p) for p in padding],
            rhs_dilation=tuple(dilation), dimension_numbers=dn, feature_group_count=groups,
            precision=ctx.precision, preferred_element_type=dt)
    else:
        out = _conv_transpose(x, w, stride, padding, dilation, output_padding, groups, dt, ctx.precision)
    if bias is not None:
        out = out + bias.astype(dt).reshape((1, -1) + (1,) * nd)
    return out


def _conv_transpose(x, w, stride, padding, dilation, output_padding, groups, dt, precision):
    nd = x.ndim - 2
    # weight (Cin, Cout/groups, k...) -> (Cout, Cin/groups, k...) flipped
    cin = w.shape[0]
    w = w.reshape((groups, cin // groups) + w.shape[1:])
    w = jnp.swapaxes(w, 1, 2).reshape((groups * w.shape[2], cin // groups) + w.shape[3:])
    w = jnp.flip(w, axis=tuple(range(2, 2 + nd)))
    pads = []
    for k, p, d, op in zip(w.shape[2:], padding, dilation, output_padding):
        lo = d * (k - 1) - p
        pads.append((lo, lo + op))
    dn = lax.conv_dimension_numbers(x.shape, w.shape, _conv_dims(nd))
    return lax.conv_general_dilated(
        x, w, window_strides=(1,) * nd, padding=pads, lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation), dimension_numbers=dn, feature_group_count=groups,
        precision=precision, preferred_element_type=dt)


@register(aten._trilinear.default)
def _trilinear(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """sum over `sumdim` of i1 * i2 * i3, each unsqueezed at its `expand` dims (what
    F.bilinear calls), as eager pairs them: i1 * i2 first, summed over the dims i3
    lacks, that product stored in the tensor's dtype (rounded in bfloat16), then with
    i3 over the rest. Two einsums. (Eager also loops over `unroll_dim` and, when that
    dim is summed, adds the slices in the dtype; here that sum is part of the second
    einsum.) A size-1 dim facing a larger one broadcasts; einsum does not, so such a
    dim is squeezed and its letter left out of that operand."""
    ins = []
    for x, expand in zip((i1, i2, i3), (expand1, expand2, expand3)):
        for d in sorted(expand):
            x = jnp.expand_dims(x, d)
        ins.append(x)
    total = ins[0].ndim
    # broadcast sizes: a 0 wins over a 1 as in any broadcast
    full = [0 if any(x.shape[d] == 0 for x in ins) else max(x.shape[d] for x in ins) for d in range(total)]
    letters = [chr(ord("a") + d) for d in range(total)]
    operands, subs = [], []
    for x in ins:
        keep = [d for d in range(total) if x.shape[d] == full[d]]
        operands.append(x.reshape([x.shape[d] for d in keep]))
        subs.append("".join(letters[d] for d in keep))
    summed = set(sumdim)
    first = {letters[d] for d in summed if d != unroll_dim and d in set(expand3)}
    mid = "".join(c for c in letters if (c in subs[0] or c in subs[1]) and c not in first)
    out = "".join(letters[d] for d in range(total) if d not in summed)
    acc = opmath(ctx.jdtype)
    buf = jnp.einsum(f"{subs[0]},{subs[1]}->{mid}", operands[0], operands[1], precision=ctx.precision,
                     preferred_element_type=acc)
    return jnp.einsum(f"{mid},{subs[2]}->{out}", stepwise_rounding(ctx.jdtype)(buf), operands[2],
                      precision=ctx.precision, preferred_element_type=acc)
