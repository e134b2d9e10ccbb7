"""Host reads of views of device data: slice on the device, download only the view.

A view of a tensor that holds device data (`w[0]`, `w[:10]`, `w.t()[3]`, a chain of
views) is read without a step graph (issue #12: no graph compiled or counted, no
`InputOutputAliasCount` sample, nothing donated) and without downloading the base
(issue #21: `float(w[0].cpu())` on a 1 GiB tensor copied 1 GiB). Two device-side
paths, both plain `jax.jit` functions that lazyxla's compile cache and metrics never
see, and that donate nothing:

* strided: a view made only of index views (select, slice, transpose, permute,
  expand, diagonal, as_strided, unfold, views that keep strides) is a strided window
  into the row-major base: `(size, stride, offset)`, computed by replaying the chain
  on a meta tensor (no data). One gather program per (base shape, dtype, view shape)
  takes the offset and strides as runtime operands, so reading `w[0]`, `w[1]`, ...
  compiles once; XLA fuses the index arithmetic into the gather (no index buffer).
* replayed: any other chain (a dtype reinterpretation such as view_as_real, a reshape
  that is not a view of the row-major base) runs the chain's own lowering rules in a
  small jitted program, cached by the chain's structure.
"""
from __future__ import annotations

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..compile.program import build
from ..frontend.views import apply_view_chain
from ..ir.node import Node
from ..patches import x64
from ..runtime.device_data import DeviceData
from ..runtime.transfer import download
from .collect import collect

_aten = torch.ops.aten
# View ops whose result is a strided window of their input, with the same values.
_STRIDED = frozenset((
    _aten.view.default, _aten._unsafe_view.default, _aten._reshape_alias.default, _aten.reshape.default,
    _aten.t.default, _aten.transpose.int, _aten.permute.default, _aten.expand.default,
    _aten.slice.Tensor, _aten.select.int, _aten.unsqueeze.default, _aten.squeeze.default,
    _aten.squeeze.dim, _aten.squeeze.dims, _aten.alias.default, _aten.diagonal.default,
    _aten.as_strided.default, _aten.unfold.default))
_RESHAPES = frozenset((_aten.view.default, _aten._unsafe_view.default, _aten._reshape_alias.default,
                       _aten.reshape.default))
_CACHE_MAX = 256


@x64
def read_view(data: DeviceData, base: Node, chain) -> torch.Tensor:
    """CPU copy of view `chain` of `base` (a DATA node over `data`), moving only the
    view's elements off the device."""
    array = data.live_array()     # raises DonatedBufferError for a donated base
    window = strided_window(base.shape, base.dtype, chain)
    if window is not None:
        size, stride, offset = window
        view = _gather(array.shape, array.dtype, size)(array, np.int64(offset), np.asarray(stride, np.int64))
    else:
        view = _replayed(base, chain)(array)
    return download(view, chain[-1][3])


def strided_window(shape: tuple, dtype: torch.dtype, chain):
    """(size, stride, offset) of the view in the row-major base, or None when the chain
    is not a pure strided window of it."""
    t = torch.empty(shape, dtype=dtype, device="meta")
    for op, vargs, out_shape, out_dtype, _sig in chain:
        if op not in _STRIDED or out_dtype != dtype:
            return None
        try:
            t = _aten.view.default(t, out_shape) if op in _RESHAPES else op(t, *vargs)
        except RuntimeError:    # a reshape the row-major base cannot view: replay instead
            return None
        if tuple(t.shape) != tuple(out_shape):
            return None
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


@functools.lru_cache(maxsize=_CACHE_MAX)
def _gather(base_shape: tuple, base_dtype, size: tuple):
    def gather(base, offset, strides):
        index = jnp.broadcast_to(offset, size)
        for d in range(len(size)):
            index = index + lax.broadcasted_iota(jnp.int64, size, d) * strides[d]
        return jnp.reshape(base, (-1,)).at[index].get(mode="promise_in_bounds")
    return jax.jit(gather)


_replayed_cache: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()


def _replayed(base: Node, chain):
    """A jitted program applying `chain` to the base array, through the lowering rules
    a graph would use (collect + build), cached by the chain's structure."""
    graph, _ = collect(base.data.device, [(apply_view_chain(base, chain), None)])
    fn = _replayed_cache.get(graph.key)
    if fn is None:
        program, _ = build(graph)
        fn = _replayed_cache[graph.key] = jax.jit(lambda array: program(array)[0])
        if len(_replayed_cache) > _CACHE_MAX:
            _replayed_cache.popitem(last=False)
    else:
        _replayed_cache.move_to_end(graph.key)
    return fn
