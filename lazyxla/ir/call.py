"""A whole JAX function as one IR node (the CALL node).

Compiled functions (`torch.compile` graphs) and gradient-accumulation loops are
captured once as a pure JAX function and then inserted into the pending lazy
graph as a single node per call, so they fuse into the step graph at the next
sync and take part in its donation like any other op.

The node's `op` is a `Subprogram`; its `inputs` are the operand nodes in the
order the function takes them; it always has `nout = len(out_avals)` outputs,
read through GETITEM nodes (ir/build.py `call_node`, `call_outputs`, whose signature
builder keys the node by the program's `key` plus the operand avals), so the graph key
(and the compile cache) treat two calls of the same program exactly like two calls of
the same ATen op.
"""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

import torch

from .node import intern_sig


class Subprogram:
    """An immutable pure JAX function with a structural key.

    `fn(*operands) -> tuple of arrays`, one per entry of `out_avals`
    (`(shape, torch dtype)` pairs). Equal keys must mean the same computation:
    the key stands for `fn` in graph keys and compile-cache keys.
    """
    __slots__ = ("fn", "key", "key_id", "name", "out_avals", "out_shapes", "out_dtypes", "user_jax")

    def __init__(self, fn: Callable, key: Hashable, name: str,
                 out_avals: Sequence[tuple[tuple, torch.dtype]], user_jax: bool = False) -> None:
        self.fn = fn
        # a user's JAX function (lx.call_jax, lx.jax_op, their backward), not a program
        # lazyxla built: traced as JAX traces it on a platform without 64-bit types where the
        # graph holds none (compile/program.py `_rule_for`)
        self.user_jax = user_jax
        self.key = key
        # The key holds the captured graph's whole structure (hundreds of entries); a
        # tuple does not cache its hash, so each call's node signature uses this id.
        self.key_id = intern_sig(("subprogram", key))
        self.name = name
        self.out_avals = tuple((tuple(s), d) for s, d in out_avals)
        self.out_shapes = tuple(s for s, _ in self.out_avals)   # the CALL node's, per call
        self.out_dtypes = tuple(d for _, d in self.out_avals)

    def rule(self, ctx, *operands) -> tuple:
        """Lowering of a CALL node of this program (compile/program.py)."""
        return tuple(self.fn(*operands))

    def __repr__(self) -> str:
        return f"call[{self.name}]"
