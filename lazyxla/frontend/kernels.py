"""Registration of the `lazyxla` device with PyTorch.

Route (verified on torch 2.11 to 2.15, see docs/design.md and torch_compat.py): PrivateUse1 renamed to
"lazyxla" with a Python device guard so autograd works without C++; Python
kernels on the PrivateUse1 key for allocation and for the factory ops whose
composite kernels would resize an `out=` tensor (a wrapper subclass cannot be
resized); every other op on a lazy tensor reaches `LazyTensor.__torch_dispatch__`.
"""
from __future__ import annotations

import functools

import torch

from .._jax import jax_dtype
from ..ir.build import op_node
from ..ir.node import Node
from ..lock import LOCK
from ..metrics import _counters as counters
from ..state import STATE
from . import device_module
from . import tensor as _tensor
from .device import DEVICE_TYPE, device_index
from .handlers import copy_from_host
from .storage import Storage
from .sync_hooks import eager_run
from .tensor import LazyTensor
from .torch_compat import setup_python_backend
from .tracing import check_allocation, contiguous_strides

@functools.cache
def register_backend() -> None:
    """Rename PrivateUse1 to "lazyxla" with `torch.lazyxla` as its device module (once)."""
    setup_python_backend(DEVICE_TYPE, device_module)


def register_kernels() -> None:
    """Python kernels on the PrivateUse1 key (called once, by registration.install)."""
    lib = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten

    # These kernels are entry points like __torch_dispatch__, and run through it: the
    # bound dispatcher (provenance may wrap it) holds the runtime lock (lazyxla/lock.py),
    # so that a sync in another thread never sees them half done.
    def dispatch(op, args, kwargs):
        return _tensor.dispatch_op(op, args, kwargs)

    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return _empty(tuple(size), None, dtype, device)

    def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        return _empty(tuple(size), tuple(stride), dtype, device)

    def _empty(size, stride, dtype, device):
        dtype = dtype or torch.get_default_dtype()
        jax_dtype(dtype)
        index = device_index(device)
        check_allocation(size, dtype)
        node = _zeros_node(size, dtype)
        spec = (size, stride if stride is not None else contiguous_strides(size), 0, dtype)
        if STATE.op_records:   # lx.metrics.set_op_records: a fresh lazyxla tensor
            counters["CreateXlaTensor"] += 1
        with LOCK:
            st = Storage(node, index)
            out = LazyTensor.wrap(st, None, node, spec)
            if STATE.eager and not STATE.eager_depth:   # eager mode: a factory's value exists at once
                eager_run([st])
            return out

    def _zeros_node(size, dtype) -> Node:
        return op_node(aten.zeros.default, (size,), {"dtype": dtype}, size, dtype)

    def copy_from(src, dst, non_blocking=False):
        with LOCK:
            copy_from_host(src, dst)
        return dst

    def factory(op):
        def kernel(*args, **kwargs):
            return dispatch(op, args, kwargs)
        return kernel

    lib.impl("empty.memory_format", empty, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    lib.impl("_copy_from", copy_from, "PrivateUse1")
    for name, op in (("arange.start_step", aten.arange.start_step), ("eye.m", aten.eye.m),
                     ("triu_indices", aten.triu_indices.default),
                     ("tril_indices", aten.tril_indices.default)):
        lib.impl(name, factory(op), "PrivateUse1")
    lib.impl("arange", lambda end, **kw: dispatch(aten.arange.start_step, (0, end, 1), kw), "PrivateUse1")
    lib.impl("arange.start", lambda start, end, **kw: dispatch(aten.arange.start_step, (start, end, 1), kw),
             "PrivateUse1")
    lib.impl("eye", lambda n, **kw: dispatch(aten.eye.m, (n, n), kw), "PrivateUse1")
    lib.impl("randperm", _randperm, "PrivateUse1")
    _LIBS.append(lib)


_LIBS: list = []


def _randperm(n, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    # A permutation drawn on the host from PyTorch's generator: exact eager values,
    # and randperm is not on any hot path.
    perm = torch.randperm(n, dtype=dtype or torch.int64, generator=generator)
    return perm.to(device)
