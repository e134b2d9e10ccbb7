"""Advanced indexing (`x[i, :, j]`, `x[mask]`, `x[mask] = v`) as decompositions over lazy tensors.

These steps are torch-level: a k-d boolean mask in `x[mask]` gives a result whose
shape depends on the data, so the mask is read on the host once (`nonzero`) and
becomes k index tensors; CPU index tensors are uploaded; a 0-d mask runs on the host.
What is left is `_unsafe_index` / `_unsafe_index_put`, which lower/indexing.py lowers
to pure JAX (a single mask written through `x[mask] = v` stays on the device there).
"""
from __future__ import annotations

import torch

from ..ir.ops import registrar
from .fallback import run_on_host
from .primitives import op_info

aten = torch.ops.aten
register_decomposition = registrar("decomposition")


def _is_mask(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def _masks_to_indices(x, indices) -> list:
    """Replace each k-d boolean mask by its k index tensors (one host read of a device mask)."""
    out = []
    for t in indices:
        if _is_mask(t):
            cols = t.bool().nonzero().unbind(1)
            out.extend(c.to(x.device) if c.device != x.device else c for c in cols)
        else:
            out.append(t)
    return out


def _on_device(x, indices) -> list:
    """PyTorch accepts CPU index tensors for device tensors: upload them (masks too)."""
    return [t.to(x.device) if isinstance(t, torch.Tensor) and t.device != x.device and t.dim() else t
            for t in indices]


def _has_0d_mask(indices) -> bool:
    return any(_is_mask(t) and t.dim() == 0 for t in indices)


def _host(func, *args):
    return run_on_host(func, op_info(func), args, {})


@register_decomposition(aten.index.Tensor)
def _index_decomp(x, indices):
    if _has_0d_mask(indices):
        return _host(aten.index.Tensor, x, indices)
    if any(_is_mask(t) for t in indices):
        indices = _masks_to_indices(x, indices)
    return aten._unsafe_index.Tensor(x, _on_device(x, indices))


def _single_mask(indices) -> bool:
    """Only one non-None index, a mask: `x[mask] = v`, `x[:, mask] += v` (no host trip)."""
    real = [t for t in indices if t is not None]
    return len(real) == 1 and _is_mask(real[0]) and real[0].dim() > 0


@register_decomposition(aten.index_put.default, aten._index_put_impl.default)
def _index_put_decomp(x, indices, values, accumulate=False, unsafe=False):
    if _has_0d_mask(indices):
        return _host(aten.index_put.default, x, indices, values, accumulate)
    if any(_is_mask(t) for t in indices):
        if _single_mask(indices):
            indices = [t.bool() if t is not None else None for t in indices]
        else:
            indices = _masks_to_indices(x, indices)
    return aten._unsafe_index_put.default(x, _on_device(x, indices), values, accumulate)


@register_decomposition(aten.index_put_.default, aten._index_put_impl_.default)
def _index_put_inplace(x, indices, values, accumulate=False, unsafe=False):
    return x.copy_(_index_put_decomp(x, indices, values, accumulate))
