"""`scan(fn, init, xs)`: a Python loop over the leading dimension as one XLA loop
(PyTorch/XLA's `torch_xla.experimental.scan`; README.md, "Loops over layers: scan"): the public
functions and the autograd node around the loop.

`fn(carry, x) -> (new_carry, y)` is traced once (scan_trace.py); one CALL node runs
it over the leading dimension in a `lax.scan` (scan_programs.py) and fuses into the
step graph at the next sync. The backward is a second loop, in reverse, that re-runs
each iteration or reads its saved activations (`rematerialize`); docs/design.md,
"scan", weighs the options and the measured cost.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Optional
from weakref import WeakKeyDictionary

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..frontend.tensor import LazyTensor
from ._loop import one_device
from .scan_programs import Plan
from .scan_trace import ScanError, differentiable, trace

# fn -> {structural key: Trace}: the traces of pure functions (is_fn_pure=True).
_TRACES: WeakKeyDictionary = WeakKeyDictionary()


def scan(fn: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any, *,
         is_fn_pure: bool = False, rematerialize: bool = True) -> tuple[Any, Any]:
    """`(final_carry, ys)`: `fn` applied along dim 0 of `xs`, threading the carry;
    equal to the Python loop, in one compiled loop (docs/design.md, "scan").

    `is_fn_pure=True` promises that `fn`'s traced ops depend only on the shapes and
    dtypes of its arguments (not on Python state or on which outer tensors it reads):
    its forward and backward iterations are then traced at the first call and reused
    by later calls with the same structure, whatever the length.

    `rematerialize=True` (the default) keeps no activations: the backward re-runs
    each iteration from its saved carry (one more forward per iteration, memory for
    the carries only). `rematerialize=False` has the forward loop save what autograd
    needs, stacked per iteration, and the backward only reads it (PyTorch/XLA's
    default; docs/design.md, "scan", for the measured trade-off)."""
    return scan_cached(fn, init, xs, trace_cache(fn) if is_fn_pure else None, rematerialize=rematerialize)


def trace_cache(fn: Callable) -> dict:
    """The cache of `fn`'s traces (for `scan_cached`), kept as long as `fn` lives."""
    try:
        return _TRACES.setdefault(fn, {})
    except TypeError:
        raise ScanError(f"scan: is_fn_pure=True keeps fn's traces keyed by fn, and a "
                        f"{type(fn).__name__} cannot be weakly referenced; wrap it in a function") from None


def scan_cached(fn: Callable, init: Any, xs: Any, cache: Optional[dict], tag: Hashable = None, *,
                rematerialize: bool = True) -> tuple[Any, Any]:
    """scan, reusing the traces in `cache` (a dict this function fills; None: trace
    anew) under keys that start with `tag`."""
    if not callable(fn):
        raise ScanError(f"scan: fn must be callable, got {type(fn).__name__}")
    init_leaves, init_spec = tree_flatten(init)
    xs_leaves, xs_spec = tree_flatten(xs)
    device = _check_leaves(init_leaves, xs_leaves)
    length = xs_leaves[0].shape[0]
    grad_mode = torch.is_grad_enabled()
    traced = None
    if cache is not None:
        key = (tag, device, grad_mode, rematerialize, init_spec, xs_spec,
               tuple((tuple(t.shape), t.dtype, t.requires_grad) for t in init_leaves),
               tuple((tuple(x.shape[1:]), x.dtype, x.requires_grad) for x in xs_leaves))
        traced = cache.get(key)
    if traced is None:
        traced = trace(fn, init_spec, xs_spec, init_leaves, xs_leaves, grad_mode, eager_backward=cache is not None,
                       save_activations=grad_mode and not rematerialize)
        if cache is not None:
            cache[key] = traced
    body = traced.body
    closures = body.closures
    need_grad = grad_mode and (bool(closures) or any(t.requires_grad for t in init_leaves + xs_leaves))
    plan = Plan(traced, length, device, init_leaves, xs_leaves, need_grad)
    if need_grad:
        outs = _ScanFunction.apply(plan, *init_leaves, *xs_leaves, *closures)
    else:
        outs = plan.run_forward(init_leaves, xs_leaves)[:plan.n_out]
    outs = list(outs)
    carry = tree_unflatten(outs[:len(init_leaves)], body.carry_spec)
    ys = body.unflatten_ys(outs[len(init_leaves):])
    return carry, ys


def _check_leaves(init_leaves: list, xs_leaves: list) -> int:
    if not xs_leaves:
        raise ScanError("scan: xs has no tensors; the loop length is xs's leading dimension")
    device = one_device(ScanError, "scan", (("init", init_leaves), ("xs", xs_leaves)),
                        "Move tensors with t.to(lx.device()).")
    lengths = [x.shape[0] if x.dim() else None for x in xs_leaves]
    if None in lengths:
        raise ScanError("scan: every leaf of xs needs a leading dimension to iterate over; "
                        f"leaf {lengths.index(None)} is 0-d")
    if len(set(lengths)) > 1:
        raise ScanError(f"scan: the leaves of xs have different lengths along dim 0 ({lengths}); "
                        "they must all have the loop's length")
    if lengths[0] == 0:
        raise ScanError("scan: xs has length 0; there is no iteration to run")
    return device


class _ScanFunction(torch.autograd.Function):
    """The loop as one autograd node: inputs (*init, *xs, *closures), outputs
    (*final carry, *ys); backward is the reverse loop (docs/design.md, "scan")."""

    @staticmethod
    def forward(ctx, plan: Plan, *tensors: LazyTensor):
        init = tensors[:plan.n_carry]
        xs = tensors[plan.n_carry:plan.n_carry + plan.n_xs]
        outs = plan.run_forward(init, xs)
        residuals = outs[plan.n_out:plan.n_out + plan.n_res]
        carries = outs[plan.n_out + plan.n_res:]
        ctx.plan = plan
        ctx.save_for_backward(*carries, *xs, *residuals)   # carries: none if the backward reads none
        results = outs[:plan.n_out]
        ctx.mark_non_differentiable(*[r for r in results if not differentiable(r)])
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        plan: Plan = ctx.plan
        saved = ctx.saved_tensors
        n_carry, n_xs = plan.n_carry, plan.n_xs
        n_saved = n_carry if plan.save_carries else 0
        carries, xs, residuals = saved[:n_saved], saved[n_saved:n_saved + n_xs], saved[n_saved + n_xs:]
        carry_avals = plan.forward.program.out_avals[:n_carry]
        g_carry = [_zeros_if_none(g, shape, dtype, plan.device) for g, (shape, dtype) in zip(grads, carry_avals)]
        ys = grads[n_carry:]
        y_avals = plan.forward.program.out_avals[n_carry:plan.n_out]
        g_ys = [_zeros_if_none(g, (plan.length, *shape), dtype, plan.device)
                for g, (shape, dtype) in zip(ys, y_avals)]
        with torch.no_grad():
            return (None, *plan.run_backward(list(carries), list(xs), g_carry, g_ys, list(residuals)))


def _zeros_if_none(g: Optional[torch.Tensor], shape: tuple, dtype: torch.dtype, device: int) -> torch.Tensor:
    """A zero cotangent for an output the loss does not depend on."""
    if g is not None:
        return g
    return torch.zeros(shape, dtype=dtype, device=torch.device("lazyxla", device))
