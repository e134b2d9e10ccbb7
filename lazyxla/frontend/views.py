"""Views with PyTorch semantics over immutable IR.

A view tensor records the chain of view steps from its base. Its value is the
chain applied to the base's current value (re-derived after any write to the
alias group). An in-place write to a view becomes a write to the base:
`VIEW_SCATTER(base, new_view_value, step)` per step, innermost first, whose
lowering puts the new values where the view reads from (lower/views.py).

A step is `(op, static_args, shape, dtype, signature)`, the last the view op's
`OpSignature` (ir/build.py): everything needed to rebuild the view node without
shape inference.
"""
from __future__ import annotations

from ..ir.build import op_node, traced_node
from ..ir.node import VIEW_SCATTER, Node


def view_node(step, src: Node) -> Node:
    return traced_node(step[0], (src,) + step[1], None, (src,), step[4])


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
    return op_node(VIEW_SCATTER, (base, inner_new, step[0], step[1]), None, base.shape, base.dtype)
