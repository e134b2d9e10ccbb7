"""`__torch_dispatch__` for lazy tensors: route each ATen op to its handler.

Each OpOverload is classified once (opinfo.py) into one handler:
* functional op with a lowering      -> record a node, wrap fresh outputs
* in-place op (`add_`)               -> node of the functional op, written into self
* `out=` op                          -> node of the functional op, written into out
* view op                            -> a view tensor on the same storage
* op with a PyTorch decomposition    -> run the decomposition on lazy tensors
* anything else                      -> host fallback (fallback.py)
plus a few special handlers (copies, detach, RNG, foreach, host reads).
"""
from __future__ import annotations

import time

import torch

from .. import config, metrics
from ..ir.node import DATA, Node, intern_sig
from ..ir.ops import facts
from ..lower.registry import LOWERINGS
from ..state import STATE
from .device import DEVICE_TYPE
from . import host_operands
from .foreach import foreach_handler
from .host_operands import HostOperand
from .opinfo import OpInfo, functional_variant, is_inplace, is_out
from .sync_hooks import cut_graphs, eager_run
from .tensor import LazyTensor, copy_bits
from .torch_compat import decomposition_table, has_composite_implicit_kernel
from .tracing import DeviceMismatchError, convert_call, lookup, make_node, trace, wrap_outputs

aten = torch.ops.aten
_INFOS: dict = {}
# lazyxla's own decompositions (Python over lazy tensors), consulted before PyTorch's
# table: for ops whose schema hides a mutation (native_batch_norm updates running stats)
# or whose PyTorch decomposition reaches ops without a lowering (native_dropout -> rand_like)
DECOMPOSITIONS = facts("decomposition")
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


def dispatch(func, args, kwargs):
    info = _INFOS.get(func)
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
                                      else None if info.handler is _fallback   # counts itself
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


def op_info(func) -> OpInfo:
    info = _INFOS.get(func)
    return info if info is not None else classify(func)


def run_op(func, args, kwargs):
    """Record `func` from inside lazyxla (not a dispatcher entry: not counted in TracedOps)."""
    info = op_info(func)
    return info.handler(func, info, args, kwargs)


# -- handlers ------------------------------------------------------------------------

def _functional(func, info, args, kwargs):
    node, entry, device = trace(func, info, args, kwargs)
    return wrap_outputs(node, entry, device)


_FILLS = (aten.fill.Scalar, aten.fill.Tensor, aten.zero.default)


def check_no_internal_overlap(t: LazyTensor) -> None:
    """Eager refuses writes into views where several elements share memory (expand)."""
    shape, stride = t._mkey[0], t._mkey[1]
    for size, st in zip(shape, stride):
        if st == 0 and size > 1:
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a "
                "single memory location. Please clone() the tensor before performing the operation.")


def check_lazy_target(t, info) -> None:
    """In-place / out= targets must be lazy tensors: a CPU target with lazy operands is a
    device mismatch (as in eager PyTorch), not an AttributeError deep in the runtime."""
    if not isinstance(t, LazyTensor):
        raise DeviceMismatchError(
            f"lazyxla: {info.name} would write into a {getattr(t, 'device', type(t).__name__)} tensor "
            "from lazyxla tensors; expected all tensors on the lazyxla device. Move the target with "
            "t.to(lx.device()), or read the result with .cpu() first.")


def _inplace(func, info, args, kwargs):
    self = args[0]
    if type(self) is not LazyTensor:
        check_lazy_target(self, info)
    if self._view is not None and info.functional not in _FILLS:  # eager fills overlapping memory
        check_no_internal_overlap(self)
    nargs, nkw, inputs, key, _ = convert_call(info, args, kwargs)
    entry = lookup(key, func, args, kwargs)  # meta run of the in-place op: eager's errors
    self.write(make_node(info.functional, nargs, nkw, inputs, entry))
    return self


def cast_node(node: Node, dtype: torch.dtype) -> Node:
    if node.dtype == dtype:
        return node
    sig = intern_sig(("cast", node.shape, node.dtype, dtype))
    return Node(aten._to_copy.default, (node,), {"dtype": dtype}, (node,), node.shape, dtype, sig)


def expand_node(node: Node, shape: tuple) -> Node:
    if node.shape == shape:
        return node
    sig = intern_sig(("expand_copy", node.shape, node.dtype, shape))
    return Node(aten.expand_copy.default, (node, shape), None, (node,), shape, node.dtype, sig)


def assign(dst: LazyTensor, node: Node) -> None:
    """dst[...] = node's value, broadcasting and converting like `copy_`."""
    dst.write(expand_node(cast_node(node, dst.dtype), tuple(dst.shape)))


def _out(func, info, args, kwargs):
    kw = dict(kwargs)
    out = kw.pop("out")
    functional = info.functional
    for o in (out if isinstance(out, (tuple, list)) else (out,)):
        check_lazy_target(o, info)
    result = run_op(functional, args, kw)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for o, r in zip(outs, results):
        if tuple(o.shape) != tuple(r.shape):
            raise RuntimeError(
                f"lazyxla: {info.name} with out= needs an out tensor of the result's shape "
                f"{list(r.shape)}, got {list(o.shape)}; lazy tensors cannot be resized. "
                "Call the functional form instead (e.g. y = torch.op(x)).")
        assign(o, r.lazy_value())
    return out


def _positional(info, args, kwargs) -> tuple:
    """All arguments after self as a positional tuple (schema defaults filled in)."""
    if not kwargs:
        rest = args[1:]
    else:
        schema_args = info.func._schema.arguments
        rest = list(args[1:])
        for a in schema_args[len(args):]:
            if a.name in kwargs:
                rest.append(kwargs[a.name])
            elif a.has_default_value():
                rest.append(a.default_value)
            else:
                break
    return tuple(tuple(a) if isinstance(a, list) else a for a in rest)


def _view(func, info, args, kwargs):
    self = args[0]
    vargs = _positional(info, args, kwargs)
    key = (func, self._mkey) + vargs
    entry = lookup(key, func, args, kwargs)
    spec = entry.spec
    step = (func, vargs, spec[0], spec[3], entry.sig)
    parent = self.checked_value()
    node = Node(func, (parent,) + vargs, None, (parent,), spec[0], spec[3], entry.sig)
    chain = (self._view or ()) + (step,)
    return copy_bits(self, LazyTensor.wrap(self._st, chain, node, spec))


def _alias(func, info, args, kwargs):
    """detach / alias: a new tensor object over the same storage and view."""
    self = args[0]
    return copy_bits(self, LazyTensor.wrap(self._st, self._view, self.checked_value(), self._mkey))


def _identity(func, info, args, kwargs):
    return args[0]


def _decompose(func, info, args, kwargs):
    out = decomposition_for(func)(*args, **kwargs)
    if out is NotImplemented:  # some PyTorch decompositions decline some arguments
        return _fallback(func, info, args, kwargs)
    return out


def _inplace_decomposed(func, info, args, kwargs):
    self = args[0]
    check_lazy_target(self, info)
    lookup(convert_call(info, args, kwargs)[3], func, args, kwargs)  # eager's errors
    result = decomposition_for(info.functional)(*args, **kwargs)
    assign(self, result.lazy_value())
    return self


def _fallback(func, info, args, kwargs):
    from .fallback import run_on_host
    return run_on_host(func, info, args, kwargs)


def classify(func) -> OpInfo:
    info = OpInfo(func)
    special = SPECIAL.get(func)
    name = info.name
    if special is not None:
        info.handler = special
    elif func in DECOMPOSITIONS:  # lazyxla's own, also for in-place ops (index_put_ with CPU indices)
        info.handler = _decompose
    elif name.startswith("_foreach_"):
        info.handler = foreach_handler
    elif func.is_view:
        info.handler = _view if func in LOWERINGS else _fallback_or_decompose(func)
    elif is_inplace(func):
        info.functional = functional_variant(func)
        if info.functional in LOWERINGS:
            info.handler = _inplace
        elif info.functional is not None and decomposition_for(info.functional) is not None:
            info.handler = _inplace_decomposed
        else:
            info.handler = _fallback_or_decompose(func)
    elif is_out(func):
        info.functional = functional_variant(func)
        info.handler = _out if info.functional is not None else _fallback_or_decompose(func)
    elif func._schema.is_mutable:
        info.handler = _fallback_or_decompose(func)
    else:
        info.handler = _functional if func in LOWERINGS else _fallback_or_decompose(func)
    if _is_like_factory(func):
        info.handler = _honouring_device_kwarg(info.handler)
    _INFOS[func] = info
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
    return _decompose if decomposition_for(func) is not None else _fallback


_DECOMPS: dict = {}


def decomposition_for(func):
    """lazyxla's own decomposition, else PyTorch's, else the op's CompositeImplicitAutograd
    kernel (such ops reach us when a decomposition calls them, e.g. flatten, pad), else None."""
    if func in _DECOMPS:
        return _DECOMPS[func]
    fn = DECOMPOSITIONS.get(func) or decomposition_table.get(func)
    if fn is None and has_composite_implicit_kernel(func):
        fn = func.decompose
    _DECOMPS[func] = fn
    return fn


from .special import SPECIAL  # noqa: E402  (special handlers use the helpers above)
from . import decompositions, fused_optim, histograms, host_reads, indexing  # noqa: E402,F401  (register)
from .tensor import bind_dispatch  # noqa: E402

bind_dispatch(dispatch)
from .provenance import follow_mode  # noqa: E402
follow_mode(dispatch)   # STATE's provenance mode (LAZYXLA_PROVENANCE at first) picks the dispatcher
