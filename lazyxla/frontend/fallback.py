"""Host fallback: run an op without a lowering eagerly on CPU, transparently.

The lazy operands are materialised (a partial sync that donates nothing),
copied to the host, the op runs in eager PyTorch, mutated arguments are
written back and tensor results uploaded. Each run counts in `aten::<op>`;
the first one per op warns, since it costs a sync and two transfers.
"""
from __future__ import annotations

import warnings

import torch

from .. import metrics
from ..ir.build import data_node
from ..runtime.transfer import upload
from .tensor import LazyTensor, lazy_tensors_in
from .storage import Storage
from .sync_hooks import host_values
from .tracing import contiguous_strides

_warned: set = set()


def _describe(args) -> str:
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(f"Tensor{list(a.shape)}:{a.dtype}")
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            parts.append("[" + ", ".join(f"Tensor{list(t.shape)}" for t in a if t is not None) + "]")
        else:
            parts.append(repr(a))
    return ", ".join(parts)


def run_on_host(func, info, args, kwargs):
    lazies = lazy_tensors_in(kwargs, lazy_tensors_in(args, []))
    name = func._schema.name  # "aten::gather", "prims::var", ...
    metrics.counter_add(name)
    if func not in _warned:
        _warned.add(func)
        warnings.warn(f"lazyxla: {func} has no lowering and runs on the host (CPU) with a sync and "
                      "transfers each call; counted in lx.metrics counter " + repr(name), stacklevel=4)
    device = lazies[0]._st.device if lazies else _device_kwarg(kwargs)
    hosts = dict(zip(map(id, lazies), host_values(lazies)))

    def to_host(v):
        if isinstance(v, LazyTensor):
            return hosts[id(v)]
        if isinstance(v, (list, tuple)):
            return type(v)(to_host(x) for x in v)
        if isinstance(v, torch.device) and v.type == "lazyxla":
            return torch.device("cpu")
        return v

    hargs = to_host(args)
    hkwargs = {k: to_host(v) for k, v in kwargs.items()}
    try:
        with _math_bit_fallbacks():
            result = func(*hargs, **hkwargs)
    except Exception as e:
        described = _describe(args) + "".join(f", {k}={_describe([v])}" for k, v in kwargs.items())
        msg = f"lazyxla host fallback of {func} failed for ({described}): {e}"
        try:
            err = type(e)(msg)  # same type, so callers' except clauses keep working
        except Exception:  # noqa: BLE001  (a constructor with other arguments)
            e.add_note(msg)
            raise e
        raise err from e
    # write back arguments the op mutated
    schema_args = func._schema.arguments
    for i, a in enumerate(schema_args):
        if a.alias_info is not None and a.alias_info.is_write:
            lazy = args[i] if i < len(args) else kwargs.get(a.name)
            host = hargs[i] if i < len(hargs) else hkwargs.get(a.name)
            for lz, h in zip(_as_list(lazy), _as_list(host)):
                if isinstance(lz, LazyTensor):
                    lz.write(data_node(upload(h, lz._st.device)))
    return _upload_result(result, args, hargs, device)


_K = torch._C.DispatchKey


def _math_bit_fallbacks():
    """A guard that turns torch's Conjugate and Negative fallbacks back on. Inside
    __torch_dispatch__ every key above Python is excluded, those two among them, and
    an eager kernel without math-bit support then reads a conjugated CPU tensor's
    memory as its value (found by OpInfo: the host composite of linalg.pinv of a
    complex matrix, whose `.mH` is a conj view, came out wrong)."""
    exclude = torch._C._dispatch_tls_local_exclude_set().remove(_K.Conjugate).remove(_K.Negative)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


def _as_list(v):
    return v if isinstance(v, (list, tuple)) else [v]


def _device_kwarg(kwargs) -> int:
    dev = kwargs.get("device")
    return (torch.device(dev).index or 0) if dev is not None else 0


def _upload_result(result, args, hargs, device: int):
    if isinstance(result, torch.Tensor):
        for a, h in zip(args, hargs):
            if h is result:
                return a  # in-place op returned self
        st = Storage(None, device)
        data = upload(result, device, owner=st)
        node = data_node(data)
        st.value = node
        spec = (tuple(result.shape), contiguous_strides(tuple(result.shape)), 0, result.dtype)
        return LazyTensor.wrap(st, None, node, spec)
    if isinstance(result, (list, tuple)):
        return type(result)(_upload_result(r, args, hargs, device) for r in result)
    return result
