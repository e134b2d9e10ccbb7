"""`torch_xla.experimental.scan`: lx.experimental.scan.

`partition_fn` chooses what the backward reads, as upstream: the default
(`default_partition`) saves the iteration's activations (lx.experimental.scan's
`rematerialize=False`), `min_cut_rematerialization_partition` keeps none and
re-runs the iteration in the backward (`rematerialize=True`); any other
partition function is taken as the default. Unlike upstream's partitioners, the
saved values are exactly what torch's autograd saves (no min-cut search), and
values never depend on the choice. `partition_fn` also tells cache entries apart,
as upstream's cache does. `is_fn_pure=True` reuses traces as lx.experimental.scan's
`is_fn_pure` does, kept in `_SCAN_COMPUTATION_CACHE` (fn -> {key: (iteration,
forward capture, backward capture)}; the backward is traced at the first call).
A `fn` that writes into a tensor from outside raises `InputMutationError`
(lazyxla's, also an `AssertionError` as upstream's is) and the write is undone.

`value_and_grad_partitioned(fn, init, xs)` returns one iteration's forward and
backward as lazyxla runs them: the saved activations are the iteration's inputs
`(carry, x)` (the backward re-runs `fn`), so `forward` saves the carry and
`alias_input` adds `x` back, as upstream does for activations that alias inputs.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence
from weakref import WeakKeyDictionary

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from lazyxla import experimental as _lx_experimental
from lazyxla.experimental.scan import scan_cached

from ...unsupported import unsupported_names
from .gradient_accumulation import InputMutationError as _CompatMutationError

_SCAN_COMPUTATION_CACHE: WeakKeyDictionary = WeakKeyDictionary()


def scan(fn: Callable, init: Any, xs: Any, partition_fn: Optional[Callable] = None,
         is_fn_pure: bool = False) -> tuple[Any, Any]:
    cache = _SCAN_COMPUTATION_CACHE.setdefault(fn, {}) if is_fn_pure else None
    try:
        return scan_cached(fn, init, xs, cache, partition_fn, rematerialize=rematerializes(partition_fn))
    except _lx_experimental.InputMutationError as e:
        raise _CompatMutationError(f"{e} (PyTorch/XLA reports this as an AssertionError from tracing fn "
                                   "with FakeTensors)") from e


def rematerializes(partition_fn: Optional[Callable]) -> bool:
    """Whether upstream's `partition_fn` keeps no activations (module docstring)."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    return partition_fn is min_cut_rematerialization_partition


def tree_flatten_none(pytree: Any) -> tuple[list, Callable[[Sequence], Any]]:
    """The leaves of `pytree` without its `None`s, and a function that puts them back."""
    flat, spec = tree_flatten(pytree)
    nones = [v is None for v in flat]

    def unflatten(leaves: Sequence) -> Any:
        it = iter(leaves)
        return tree_unflatten([None if none else next(it) for none in nones], spec)

    return [v for v in flat if v is not None], unflatten


def value_and_grad_partitioned(fn: Callable, init: Any, xs: Any, partition_fn: Optional[Callable] = None,
                               is_fn_pure: bool = False) -> tuple[Callable, Callable, Callable]:
    """(forward, alias_input, backward) of one iteration (module docstring)."""

    def forward(carry: Any, x: Any) -> tuple[Any, tuple[Any, Any]]:
        with torch.no_grad():
            new_carry, y = fn(carry, x)
        return new_carry, (y, carry)

    def alias_input(partial_activations: Any, x: Any) -> tuple[Any, Any]:
        return partial_activations, x

    def backward(grad_carry: Any, grad_y_and_activations: tuple) -> tuple[Any, Any]:
        grad_y, (carry, x) = grad_y_and_activations
        carry, x = (tree_map(lambda t: t.detach().requires_grad_(t.dtype.is_floating_point), v) for v in (carry, x))
        with torch.enable_grad():
            new_carry, y = fn(carry, x)
        outs, _ = tree_flatten_none((new_carry, y))
        grads, _ = tree_flatten_none((grad_carry, grad_y))
        wrt, unflatten = tree_flatten_none((carry, x))
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
        got = torch.autograd.grad([o for o, _ in pairs], [w for w in wrt if w.requires_grad],
                                  [g for _, g in pairs], allow_unused=True)
        it = iter(got)
        return unflatten([next(it) if w.requires_grad else None for w in wrt])

    return forward, alias_input, backward


__getattr__ = unsupported_names(__name__)
