"""`__torch_dispatch__` for lazy tensors: the router, which sends each ATen op to its handler.

Each OpOverload is classified once (opinfo.py) into one handler (primitives.py):
* functional op with a lowering      -> record a node, wrap fresh outputs
* in-place op (`add_`)               -> node of the functional op, written into self
* `out=` op                          -> node of the functional op, written into out
* view op                            -> a view tensor on the same storage
* op with a PyTorch decomposition    -> run the decomposition on lazy tensors
* anything else                      -> host fallback (fallback.py)
plus foreach ops (foreach.py) and the handlers of ops that need more than a node
(copies, detach, RNG, host reads: handlers.py, mathbits.py), found in the op records.
The handlers never import this module; `run_op` reaches `classify` through
`primitives.set_router` (an import-time seam: the router imports the handlers, so they
cannot import it). Every module that registers handlers is loaded by
`frontend/registration.py`, before the first op is classified.
"""
from __future__ import annotations

import time

import torch

from .. import config, metrics
from ..ir.node import DATA
from ..ir.ops import facts
from ..lock import LOCK
from ..state import STATE
from . import host_operands
from .device import DEVICE_TYPE
from .fake_meet import dispatch_with_foreign
from .foreach import foreach_handler
from .host_operands import HostOperand
from .opinfo import OpInfo, functional_variant, is_inplace, is_out
from .primitives import (
    DECOMPOSITIONS, INFOS, decompose, decomposition_for, functional, host_fallback, inplace,
    inplace_decomposed, out_variant, set_router, view)
from .sync_hooks import cut_graphs, eager_run
from .tensor import LazyTensor

aten = torch.ops.aten
# handlers of ops that need more than a node (handlers.py, mathbits.py, dynamo/donor.py)
SPECIAL = facts("special")
# ops with a lowering rule: the records' facts, which lower/ registers (lower/registry.load_all)
# before the first op is classified, read here without importing lower/
LOWERINGS = facts("lowering")
_counters = metrics._counters

# Eager mode (experimental/eager.py) and op records are run-time modes (lazyxla/state.py);
# in eager mode each op dispatched from outside lazyxla runs as its own graph before it
# returns. `STATE.eager_depth` counts the ops in progress, so the ops a handler or
# decomposition issues join their caller's graph. The per-op path tests one flag,
# `STATE.per_op` (op records or eager mode).
#
# Graph size cap: after `config.SETTINGS.graph_op_limit` (LAZYXLA_GRAPH_OP_LIMIT) traced ops
# without a sync (`STATE.traced_since_sync`), pending work is cut into a graph and run (like
# a step barrier, minus MarkStep), so a long loop without lx.sync() neither grows an
# unbounded graph nor compiles forever.


def dispatch(cls, func, types, args=(), kwargs=None):
    """`LazyTensor.__torch_dispatch__` (tensor.bind_dispatch): the op's handler, run under
    the runtime lock, so each traced op is atomic with respect to syncs in other threads
    (lazyxla/lock.py)."""
    if kwargs is None:
        kwargs = {}
    if len(types) > 1:   # another tensor subclass in the call: torch.compile's fakes
        return dispatch_with_foreign(func, LazyTensor, args, kwargs)
    info = INFOS.get(id(func))
    with LOCK:
        if info is None:
            info = classify(func)
        _counters["TracedOps"] += 1
        state = STATE
        traced = state.traced_since_sync = state.traced_since_sync + 1
        if traced > config.SETTINGS.graph_op_limit:
            cut_graphs()
        try:
            if state.per_op:
                return _per_op_dispatch(func, info, args, kwargs)
            return info.handler(func, info, args, kwargs)
        except HostOperand:   # a CPU operand with lx.set_host_operands(True): upload it, run again
            args, kwargs = host_operands.uploaded(info, args, kwargs)
            if state.per_op:
                return _per_op_dispatch(func, info, args, kwargs)
            return info.handler(func, info, args, kwargs)


def _per_op_dispatch(func, info, args, kwargs):
    """`dispatch` with op records and/or eager mode on."""
    state = STATE
    run = _recorded if state.op_records else info.handler
    if not state.eager or state.eager_depth:
        return run(func, info, args, kwargs)
    state.eager_depth += 1
    try:
        out = run(func, info, args, kwargs)
    finally:
        state.eager_depth -= 1
    pending = written_pending(args, kwargs, out)
    if pending:
        eager_run(pending)
    return out


def written_pending(args, kwargs, out) -> list:
    """Storages an op may have given pending work: those of its results and of its tensor
    arguments (in-place and `out=` targets; lists for foreach ops). Arguments that were
    still pending from lazy mode are run along, once, in the same graph."""
    found: dict = {}
    for group in ((out,) if not isinstance(out, (tuple, list)) else out, args, kwargs.values()):
        for v in group:
            if isinstance(v, LazyTensor):
                found[id(v._st)] = v._st
            elif isinstance(v, (tuple, list)):
                for x in v:
                    if isinstance(x, LazyTensor):
                        found[id(x._st)] = x._st
    return [st for st in found.values() if st.value.op is not DATA]


# Ops whose result is a host value: upstream counts them as fallbacks (`aten::<op>`).
_HOST_RESULT_OPS = frozenset((aten._local_scalar_dense.default,))
_record_names: dict = {}


def _recorded(func, info, args, kwargs):
    """`dispatch` with lx.metrics' per-op records (metrics.set_op_records)."""
    name = _record_names.get(func)
    if name is None:
        op = func._schema.name.split("::", 1)[-1]
        name = _record_names[func] = (f"aten::{op}" if func in _HOST_RESULT_OPS
                                      else None if info.handler is host_fallback   # counts itself
                                      else f"xla::{op}")
    if name is not None:
        _counters[name] += 1
    start = time.perf_counter_ns()
    out = info.handler(func, info, args, kwargs)
    metrics.metric_add("LazyTracing", time.perf_counter_ns() - start)
    inputs = {id(a) for a in args if isinstance(a, LazyTensor)}
    fresh = sum(1 for t in (out if isinstance(out, (tuple, list)) else (out,))
                if isinstance(t, LazyTensor) and id(t) not in inputs)
    if fresh:
        _counters["CreateXlaTensor"] += fresh
    return out


def classify(func) -> OpInfo:
    """Choose the op's handler, once per OpOverload."""
    info = OpInfo(func)
    special = SPECIAL.get(func)
    name = info.name
    if special is not None:
        info.handler = special
    elif func in DECOMPOSITIONS:  # lazyxla's own, also for in-place ops (index_put_ with CPU indices)
        info.handler = decompose
    elif name.startswith("_foreach_"):
        info.handler = foreach_handler
    elif func.is_view:
        info.handler = view if func in LOWERINGS else _fallback_or_decompose(func)
    elif is_inplace(func):
        info.functional = functional_variant(func)
        if info.functional in LOWERINGS:
            info.handler = inplace
        elif info.functional is not None and decomposition_for(info.functional) is not None:
            info.handler = inplace_decomposed
        else:
            info.handler = _fallback_or_decompose(func)
    elif is_out(func):
        info.functional = functional_variant(func)
        info.handler = out_variant if info.functional is not None else _fallback_or_decompose(func)
    elif func._schema.is_mutable:
        info.handler = _fallback_or_decompose(func)
    else:
        info.handler = functional if func in LOWERINGS else _fallback_or_decompose(func)
    if _is_like_factory(func):
        info.handler = _honouring_device_kwarg(info.handler)
    INFOS[id(func)] = info
    return info


def _is_like_factory(func) -> bool:
    """`zeros_like`, `new_full` & co.: a tensor in, a new tensor out wherever `device=` says."""
    name = func._schema.name.split("::")[-1]
    return (name.endswith("_like") or name.startswith("new_")) and \
        any(a.name == "device" and a.kwarg_only for a in func._schema.arguments)


def _honouring_device_kwarg(handler):
    """`torch.zeros_like(lazy, device="cpu")` is a CPU tensor, `device="lazyxla:1"` a tensor
    on that device: the input only lends its shape, dtype and strides. Other targets run
    the op on a stand-in there; the input's own device goes through `handler`."""
    def run(func, info, args, kwargs):
        target = kwargs.get("device")
        if target is not None:
            target = torch.device(target)
            x = args[0]
            if target.type != DEVICE_TYPE or (target.index or 0) != x._st.device:
                stand_in = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=target)
                return func(stand_in, *args[1:], **kwargs)
        return handler(func, info, args, kwargs)
    run.__wrapped__ = handler   # routes.py reads the route through the wrapper
    return run


def _fallback_or_decompose(func):
    return decompose if decomposition_for(func) is not None else host_fallback


# import-time seam: primitives.run_op classifies through here (primitives cannot import this module)
set_router(classify)
