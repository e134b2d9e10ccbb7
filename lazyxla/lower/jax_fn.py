"""A user's JAX function over pytrees as the flat rule of a CALL node (`lx.call_jax`).

`lx.call_jax(fn, *args, **kwargs)` records one CALL node (ir/call.py) whose
program is `flat_function(...)`: it takes the lazy tensors' arrays in order,
puts them back into the call's pytree beside the static leaves, calls `fn`
and returns the output leaves as a flat tuple. `vjp_function` is the rule of
the backward node: `jax.vjp` of the flat function, recomputing the forward
(XLA may share it with the forward when both land in one graph).

Both run while lazyxla traces a graph, i.e. under JAX's 64-bit mode
(patches.in_x64); `out_structure` evaluates shapes the same way, so what a call
records is what the compile computes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..patches import in_x64


def flat_function(fn: Callable, treedef: Any, positions: Sequence[int], statics: Sequence[Any],
                  in_dtypes: Sequence[Any]) -> Callable:
    """fn over flat arrays: `flat(*arrays) -> tuple of output leaves`. `positions` are the
    array leaves' indices among the call's leaves, `statics` the other leaves in order;
    arrays that arrive in another dtype (a storage dtype policy) are cast to `in_dtypes`.
    Each trace leaves the output's treedef in `flat.out_tree`."""
    n = len(positions) + len(statics)
    array_at = dict(zip(positions, range(len(positions))))
    static_slots = [i for i in range(n) if i not in array_at]

    def flat(*arrays):
        leaves: list = [None] * n
        for i, k in array_at.items():
            a = arrays[k]
            # the dtype JAX has for it in the mode it is traced in (x64 off: 32 bits,
            # compile/program.py `_rule_for`)
            want = jax.dtypes.canonicalize_dtype(in_dtypes[k])
            leaves[i] = a if a.dtype == want else a.astype(want)
        for i, s in zip(static_slots, statics):
            leaves[i] = s
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        out, flat.out_tree = jax.tree_util.tree_flatten(fn(*args, **kwargs))
        return tuple(jnp.asarray(o) for o in out)

    flat.out_tree = None
    return flat


def out_structure(flat: Callable, avals: Sequence[tuple[tuple, Any]]) -> tuple[Any, list[tuple[tuple, Any]]]:
    """(output treedef, [(shape, numpy dtype)] per output leaf) of a `flat_function` on
    arrays of `avals`, by `jax.eval_shape` (nothing computed)."""
    with in_x64():
        specs = jax.eval_shape(flat, *[jax.ShapeDtypeStruct(s, d) for s, d in avals])
    return flat.out_tree, [(tuple(s.shape), np.dtype(s.dtype)) for s in specs]


def vjp_function(flat: Callable, n_in: int, diff_in: Sequence[int], diff_out: Sequence[int],
                 out_avals: Sequence[tuple[tuple, Any]]) -> Callable:
    """The backward rule: `bwd(*primals, *cotangents) -> grads` of the inputs `diff_in`,
    where `cotangents` are those of the outputs `diff_out` (the others get zero cotangents,
    float0 for integer outputs)."""
    diff_out_set = set(diff_out)

    def bwd(*operands):
        primals, cts = list(operands[:n_in]), operands[n_in:]

        def of_diff(*d):
            full = list(primals)
            for i, v in zip(diff_in, d):
                full[i] = v
            return flat(*full)

        _, pull = jax.vjp(of_diff, *[primals[i] for i in diff_in])
        it = iter(cts)
        cotangents = tuple(next(it) if j in diff_out_set else _zero_cotangent(shape, dtype)
                           for j, (shape, dtype) in enumerate(out_avals))
        return tuple(pull(cotangents))

    return bwd


def _zero_cotangent(shape: tuple, dtype: Any):
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.zeros(shape, dtype)
    return np.zeros(shape, jax.dtypes.float0)
