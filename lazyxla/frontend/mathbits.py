"""torch's conjugate and negative bits on lazy tensors.

Eager `x.conj()` is `_conj`, a view that flips the conjugate bit and leaves memory as
it is; `imag` of a conjugated tensor is a `_neg_view` (negative bit). Kernels read the
memory and apply the bits. Options for lazyxla:
(a) keep the bit and the unconjugated value, and teach every lowering to read the bit
    (every rule, and every node would need the bit in its signature);
(b) materialise: `_conj` is a plain view whose lowering conjugates, the tensor carries
    no bit (values right everywhere, but `is_conj()` is False and `resolve_conj()`
    returns the view itself, an alias where eager makes a copy);
(c) chosen: (b)'s values, plus the bit on the tensor. A node always holds the
    tensor's logical value (lower/complex.py); the bit is metadata torch's own code
    reads: `is_conj()`, `resolve_conj()`/`resolve_neg()` copy (empty_like + copy_ of
    the logical value), ops without math-bit support get a resolved copy from torch's
    Conjugate/Negative fallbacks, and eager's refusals (view_as_real of a conjugated
    tensor) happen. Views and aliases keep their source's bits, as in eager.
"""
from __future__ import annotations

import torch

from ..ir.ops import register_fact
from ..state import STATE
from .primitives import view

_is_conj = torch.Tensor.is_conj
_is_neg = torch.Tensor.is_neg


# `view` gives the view its source's bits (tensor.copy_bits); these two flip one.
def conj_view(func, info, args, kwargs):
    STATE.math_bits_used = True
    out = view(func, info, args, kwargs)
    torch._C._set_conj(out, not _is_conj(args[0]))
    return out


def neg_view(func, info, args, kwargs):
    STATE.math_bits_used = True
    out = view(func, info, args, kwargs)
    torch._C._set_neg(out, not _is_neg(args[0]))
    return out


def view_as_real(func, info, args, kwargs):
    if _is_conj(args[0]):  # eager's check lives in the kernel, which a lazy tensor skips
        raise RuntimeError(
            "view_as_real doesn't work on unresolved conjugated tensors.  To resolve the conjugate "
            "tensor so you can view it as real, use self.resolve_conj(); however, be warned that the "
            "resulting tensor will NOT alias the original.")
    return view(func, info, args, kwargs)


aten = torch.ops.aten
for _op, _handler in ((aten._conj.default, conj_view), (aten._neg_view.default, neg_view),
                      (aten.view_as_real.default, view_as_real)):
    register_fact(_op, "special", _handler)
del _op, _handler
