"""A lowering rule traced and lowered with JAX's x64 mode off, inside a program that is
traced and lowered with it on: one JAX primitive that carries the rule, so that both the
rule's trace and JAX's expansion of what it calls at lowering (the TPU's SVD, QR,
Cholesky; a user's Pallas kernel) happen out of x64, the mode JAX code is written for."""
from __future__ import annotations

from typing import Callable

import jax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from ..patches import out_of_x64

_call = Primitive("lazyxla_without_x64")
_call.multiple_results = True


def _outputs(*avals, body: Callable):
    with out_of_x64():
        out = jax.eval_shape(body, *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals))
    return [jax.core.ShapedArray(o.shape, o.dtype) for o in out]


def _lowering(ctx, *operands, body: Callable):
    # the body is traced into a jaxpr and expanded to StableHLO here, at the program's
    # lowering, still out of x64: a trace out of x64 lowered under it gets 64-bit loop
    # counters and constants back
    with out_of_x64():
        return mlir.lower_fun(body, multiple_results=True)(ctx, *operands)


def _eager(*operands, body: Callable):
    # bound outside any trace (a program run op by op): the rule itself, out of x64
    with out_of_x64():
        return body(*operands)


_call.def_impl(_eager)
_call.def_abstract_eval(_outputs)
mlir.register_lowering(_call, _lowering)


def without_x64(rule: Callable) -> Callable:
    """`rule` (ctx, *operands, **kwargs) -> array or tuple of arrays, run as one `_call`
    whose array operands are the rule's array operands (the others, and ctx, stay Python
    values closed over)."""
    def traced_without_x64(ctx, *operands, **kwargs):
        leaves, tree = jax.tree.flatten((operands, kwargs))
        arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array)]
        structure = []   # the rule's output pytree, known once body has run

        def body(*values):
            filled = list(leaves)
            for i, value in zip(arrays, values):
                filled[i] = value
            args, kw = jax.tree.unflatten(tree, filled)
            out = rule(ctx, *args, **kw)
            flat, out_tree = jax.tree.flatten(out)
            structure[:] = [out_tree]
            return flat

        flat = _call.bind(*(leaves[i] for i in arrays), body=body)
        return jax.tree.unflatten(structure[0], flat)
    return traced_without_x64
