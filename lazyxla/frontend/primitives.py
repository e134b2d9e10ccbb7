"""The handler primitives: what the op router (dispatch.py) assigns to each class of op,
and what every handler shares.

* `functional`: one node, fresh outputs;   * `inplace`: a node of the functional op, written into self;
* `out_variant`: the functional op, assigned to `out=`;   * `view`: a view on the same storage;
* `alias`, `identity`;   * `decompose` / `inplace_decomposed`: a decomposition run on lazy tensors;
* `host_fallback`: eager on the CPU (fallback.py).
Shared: `run_op` (record another op from inside a handler), `assign`, `cast_node`,
`expand_node`, the write-target checks and `decomposition_for`.

`run_op` meets ops not classified yet; classifying is the router's work, so the router
installs its `classify` here (`set_router`) instead of this module importing it: the
router imports the handlers, never the other way round.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..ir.build import op_node, traced_node
from ..ir.node import Node
from ..ir.ops import facts
from .fallback import run_on_host
from .opinfo import OpInfo
from .storage import FILLS
from .tensor import LazyTensor, copy_bits
from .torch_compat import decomposition_table, has_composite_implicit_kernel
from . import tracing
from .tracing import DeviceMismatchError, convert_call, lookup, wrap_outputs
from .views import apply_view_chain

aten = torch.ops.aten
# OpInfo of each OpOverload met so far, by id(OpOverload) (filled by the router's classify).
# Keyed by id: OpOverload's __hash__ is a Python method, a call per op on the hot path; the
# id stays valid because the OpInfo holds its OpOverload.
INFOS: dict = {}


class _Router:
    """The router's `classify`, once dispatch.py has installed it."""
    classify: Optional[Callable[..., OpInfo]] = None


_ROUTER = _Router()

# lazyxla's own decompositions (Python over lazy tensors), consulted before PyTorch's
# table: for ops whose schema hides a mutation (native_batch_norm updates running stats)
# or whose PyTorch decomposition reaches ops without a lowering (native_dropout -> rand_like)
DECOMPOSITIONS = facts("decomposition")


def set_router(classify: Callable[..., OpInfo]) -> None:
    """Install the router's `classify(func) -> OpInfo`. An import-time seam: dispatch.py
    fills it at its import, since it imports this module and so cannot be imported here."""
    _ROUTER.classify = classify


def op_info(func) -> OpInfo:
    """The op's classification (its handler): cached, else made by the router."""
    info = INFOS.get(id(func))
    return info if info is not None else _ROUTER.classify(func)


def run_op(func, args, kwargs):
    """Record `func` from inside lazyxla (not a dispatcher entry: not counted in TracedOps)."""
    info = op_info(func)
    return info.handler(func, info, args, kwargs)


def functional(func, info, args, kwargs):
    # the arguments converted, the op's meta entry and its node in this frame, as `inplace`
    # does: the most frequent handler, no helper frame per op
    nargs, nkw, inputs, key, device = convert_call(info, args, kwargs)
    entry = tracing.META_CACHE.get(key) or lookup(key, func, args, kwargs)
    return wrap_outputs(traced_node(func, nargs, nkw, inputs, entry), entry, device)


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


def inplace(func, info, args, kwargs):
    self = args[0]
    if type(self) is not LazyTensor:
        check_lazy_target(self, info)
    if self._view is not None and info.functional not in FILLS:  # eager fills overlapping memory
        check_no_internal_overlap(self)
    nargs, nkw, inputs, key, _ = convert_call(info, args, kwargs)
    # a miss runs the in-place op on meta tensors: eager's errors
    entry = tracing.META_CACHE.get(key) or lookup(key, func, args, kwargs)
    self.write(traced_node(info.functional, nargs, nkw, inputs, entry))
    return self


def cast_node(node: Node, dtype: torch.dtype) -> Node:
    if node.dtype == dtype:
        return node
    return op_node(aten._to_copy.default, (node,), {"dtype": dtype}, node.shape, dtype)


def expand_node(node: Node, shape: tuple) -> Node:
    if node.shape == shape:
        return node
    return op_node(aten.expand_copy.default, (node, shape), None, shape, node.dtype)


def assign(dst: LazyTensor, node: Node) -> None:
    """dst[...] = node's value, broadcasting and converting like `copy_`."""
    dst.write(expand_node(cast_node(node, dst.dtype), tuple(dst.shape)))


def out_variant(func, info, args, kwargs):
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


def positional(info, args, kwargs) -> tuple:
    """All arguments after self as a positional tuple (schema defaults filled in)."""
    if not kwargs:
        rest = args[1:]
        if list not in map(type, rest):   # the common case, without a Python frame per argument
            return rest
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
    return tuple([tuple(a) if isinstance(a, list) else a for a in rest])   # (a list: no generator frame)


def view(func, info, args, kwargs):
    self = args[0]
    vargs = positional(info, args, kwargs)
    key = (info, self._mkey) + vargs
    entry = tracing.META_CACHE.get(key) or lookup(key, func, args, kwargs)
    spec = entry.spec
    chain = self._view
    if (chain is not None and id(func) in _PERMUTATION_IDS and id(chain[-1][0]) in _PERMUTATION_IDS
            and spec == (chain[-2][4].spec if len(chain) > 1 else self._st.base_spec)):
        return _undone(self, chain, spec)
    step = (func, vargs, spec[0], spec[3], entry)
    parent = self.checked_value()
    node = traced_node(func, (parent,) + vargs, None, (parent,), entry)
    chain = (self._view or ()) + (step,)
    # a view contiguous from offset 0 (`view` of a contiguous base, most often) is wrapped
    # without its strides, as fresh outputs are (MetaEntry.contiguous)
    return copy_bits(self, LazyTensor.wrap(self._st, chain, node, spec, entry.contiguous))


# views that only reorder dimensions; two of them in a row with the spec of the view
# before both address its elements in its order (math-bit views such as conj and _neg_view
# keep the spec and change the values, so they are not among them)
_PERMUTATIONS = (aten.t.default, aten.transpose.int, aten.permute.default)
# their ids: every view op asks, and an OpOverload's __hash__ is a Python call (the tuple
# holds the ops, so no other object can have their ids)
_PERMUTATION_IDS = frozenset(map(id, _PERMUTATIONS))


def _undone(self: LazyTensor, chain: tuple, spec: tuple) -> LazyTensor:
    """A permutation of dimensions that undoes `self`'s last one (the spec of the view before
    it: `w.t().t()`, as the gradient of every Linear weight is): that view again, one step
    shorter, so its reads and writes do not apply two steps that cancel (docs/design.md,
    "Views and in-place ops")."""
    self.checked_value()   # a donated or failed base raises, as for any view of it
    st = self._st
    rest = chain[:-1] or None
    node = st.value if rest is None else apply_view_chain(st.value, rest)
    return copy_bits(self, LazyTensor.wrap(st, rest, node, spec))


def alias(func, info, args, kwargs):
    """detach / alias: a new tensor object over the same storage and view."""
    self = args[0]
    return copy_bits(self, LazyTensor.wrap(self._st, self._view, self.checked_value(), self._mkey))


def identity(func, info, args, kwargs):
    return args[0]


def decompose(func, info, args, kwargs):
    out = decomposition_for(func)(*args, **kwargs)
    if out is NotImplemented:  # some PyTorch decompositions decline some arguments
        return host_fallback(func, info, args, kwargs)
    return out


def inplace_decomposed(func, info, args, kwargs):
    self = args[0]
    check_lazy_target(self, info)
    lookup(convert_call(info, args, kwargs)[3], func, args, kwargs)  # eager's errors
    result = decomposition_for(info.functional)(*args, **kwargs)
    assign(self, result.lazy_value())
    return self


def host_fallback(func, info, args, kwargs):
    return run_on_host(func, info, args, kwargs)


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
