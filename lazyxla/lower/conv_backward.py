"""convolution_backward as the VJP of the forward convolution rule (linalg.py),
so every forward variant (stride, padding, dilation, groups, transposed,
1-3 spatial dims) has a matching backward. Gradients the caller did not ask
for (output_mask) are not returned, and XLA drops their computation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from ._util import opmath
from .linalg import _convolution
from .registry import register

aten = torch.ops.aten


class _ForwardCtx:
    __slots__ = ("jdtype", "precision")

    def __init__(self, jdtype, precision) -> None:
        self.jdtype = jdtype
        self.precision = precision


@register(aten.convolution_backward.default)
def _convolution_backward(ctx, grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    dt = opmath(x.dtype)
    fctx = _ForwardCtx(x.dtype, ctx.precision)

    def forward(x_, w_):
        return _convolution(fctx, x_, w_, None, stride, padding, dilation, transposed, output_padding, groups)

    dx = dw = db = None
    if output_mask[0] or output_mask[1]:
        out, vjp = jax.vjp(forward, x, w)
        dx, dw = vjp(grad.astype(out.dtype))
    if output_mask[2]:
        db = jnp.sum(grad.astype(dt), axis=(0,) + tuple(range(2, grad.ndim)))
    outs = (dx if output_mask[0] else None, dw if output_mask[1] else None, db)
    return tuple(o if d is not None else None for o, d in zip(outs, ctx.jdtype))
