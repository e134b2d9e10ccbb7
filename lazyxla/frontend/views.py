"""Views with PyTorch semantics over immutable IR.

A view tensor records the chain of view steps from its base. Its value is the
chain applied to the base's current value (re-derived after any write to the
alias group). An in-place write to a view becomes a write to the base:
`VIEW_SCATTER(base, new_view_value, step)` per step, innermost first, whose
lowering puts the new values where the view reads from (lower/views.py).

A step is `(op, static_args, shape, dtype, sig)`: everything needed to rebuild
the view node without shape inference.
"""
from __future__ import annotations

from ..ir.node import VIEW_SCATTER, Node, intern_sig


def view_node(step, src: Node) -> Node:
    op, vargs, shape, dtype, sig = step
    return Node(op, (src,) + vargs, None, (src,), shape, dtype, sig)


def apply_view_chain(base: Node, chain) -> Node:
    node = base
    for step in chain:
        node = view_node(step, node)
    return node


def scatter_chain(base: Node, chain, value: Node) -> Node:
    """New base value after writing `value` into the view `chain` of `base`."""
    if not chain:
        return value
    step = chain[0]
    inner = view_node(step, base)
    inner_new = scatter_chain(inner, chain[1:], value)
    op, vargs = step[0], step[1]
    sig = intern_sig((VIEW_SCATTER, op, vargs, base.shape, base.dtype, inner_new.shape))
    return Node(VIEW_SCATTER, (base, inner_new, op, vargs), None, (base, inner_new),
                base.shape, base.dtype, sig)
