"""A collected graph as a pure JAX function.

The program is built from the graph once per cache miss and holds no IR
nodes and no device buffers (so a cached executable never keeps old data
alive): each node becomes an instruction whose arguments refer to earlier
results by position.

Lifted scalars travel as float64, int64, bool or complex128 by their Python kind and are
cast to the node's dtype inside. Up to SEPARATE_SCALARS_MAX of them are 0-d
parameters of their own; beyond that they come packed in one vector per kind.
Measured (XLA CPU):
- W2's AdamW step, 109 scalars, each feeding a small per-parameter fusion:
  compile 1.06-1.25 s separate, 1.65 s packed (every fusion slices the same
  vector); a separate argument costs about 0.25 us per call.
- W4, 2000 chained elementwise ops with 1500 scalars (Python literals reach
  the dispatcher as fresh 0-d tensors, so none are shared): one fusion reads
  them all; separate: compile 3.3 s and 4 ms per run, packed: 2.0 s and
  0.3 ms (the slices fuse; 1500 operands do not).
- But a pack defeats XLA's reuse of identical kernels: each fusion that slices its
  own element of the vector is a different kernel, compiled by LLVM on its own.
  An optimizer step over many parameters is one small fusion per parameter and
  scalar: 384 `p.add_(g, alpha=...)` compile in 10-20 s packed and 0.5 s separate
  (the same in plain JAX: 15.4 s against 0.5 s), and the 32-layer reference GPT's
  AdamW step took 29 s to compile packed. So scalars are packed only when they
  outnumber the graph's outputs PACK_SCALARS_PER_OUTPUT to one (W4's kind of graph:
  one long chain), and stay separate when each output has a few of its own.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .._jax import jax_dtype
from ..errors import LoweringError
from ..frontend.views import VIEW_SCATTER
from ..ir.call import Subprogram
from ..ir.node import DATA, GETITEM, SCALAR, Node
from ..lower.registry import LOWERINGS
from ..lower.views import view_scatter
from ..ir.graph import Graph

SCALAR_DTYPES = (np.float64, np.int64, np.bool_, np.complex128)
_SCALAR_TYPES = (float, int, bool, complex)
SEPARATE_SCALARS_MAX = 256
PACK_SCALARS_PER_OUTPUT = 4


def scalar_kind(node: Node) -> int:
    """0: travels as float64, 1: as int64, 2: as bool, 3: as complex128."""
    if node.dtype.is_floating_point:
        return 0
    if node.dtype.is_complex:
        return 3
    return 2 if node.dtype == torch.bool else 1


class Ctx:
    """What a rule may know about its node's output."""
    __slots__ = ("shape", "dtype", "jdtype", "op")

    def __init__(self, node: Node) -> None:
        self.shape = node.shape
        self.dtype = node.dtype
        self.op = node.op
        self.jdtype = tuple(jax_dtype(d) if d is not None else None for d in node.dtype) if node.nout \
            else jax_dtype(node.dtype)


class _Ref:
    __slots__ = ("pos",)

    def __init__(self, pos: int) -> None:
        self.pos = pos


def _template(value, index: dict):
    if isinstance(value, Node):
        return _Ref(index[id(value)])
    if isinstance(value, tuple):
        return tuple(_template(v, index) for v in value)
    return value


def _resolve(value, env: list):
    if type(value) is _Ref:
        return env[value.pos]
    if type(value) is tuple:
        return tuple(_resolve(v, env) for v in value)
    return value


def _rule_for(node: Node) -> Callable:
    if node.op == VIEW_SCATTER:
        return view_scatter
    if type(node.op) is Subprogram:
        return node.op.rule
    rule = LOWERINGS.get(node.op)
    if rule is None:
        raise LoweringError(f"lazyxla: no lowering for {node.op}")
    return rule


def build(graph: Graph) -> tuple[Callable, int]:
    """(fn(*params, *scalar_operands) -> outputs, number of params)."""
    index = {id(n): i for i, n in enumerate(graph.order)}
    n_params = len(graph.params)
    scalar_slot = _scalar_slots(graph, n_params)
    param_of = {}
    for i, d in enumerate(graph.params):
        param_of[id(d)] = i
    instrs = []
    for node in graph.order:
        op = node.op
        if op is DATA:
            instrs.append((0, param_of[id(node.data)], None, None, None))
        elif op is SCALAR:
            operand, element = scalar_slot[id(node)]
            instrs.append((1, operand, element, jax_dtype(node.dtype), None))
        elif op is GETITEM:
            instrs.append((2, index[id(node.inputs[0])], node.args[1], None, None))
        else:
            kwargs = {k: _template(v, index) for k, v in node.kwargs.items()} if node.kwargs else {}
            instrs.append((3, _rule_for(node), _template(node.args, index), kwargs, Ctx(node)))
    outputs = graph.outputs

    def program(*flat):
        env: list = []
        for kind, a, b, c, ctx in instrs:
            if kind == 0:
                env.append(flat[a])
            elif kind == 1:
                env.append((flat[a] if b is None else flat[a][b]).astype(c))
            elif kind == 2:
                env.append(env[a][b])
            else:
                env.append(_apply(a, ctx, _resolve(b, env), {k: _resolve(v, env) for k, v in c.items()}))
        return tuple(env[p] for p in outputs)

    return program, n_params


def _apply(rule: Callable, ctx: Ctx, args: tuple, kwargs: dict):
    try:
        out = rule(ctx, *args, **kwargs)
    except LoweringError:
        raise
    except Exception as e:
        raise LoweringError(f"lazyxla: lowering {ctx.op} failed: {type(e).__name__}: {e}") from e
    if isinstance(ctx.jdtype, tuple):
        # d is None: an output the op was asked not to compute; the rule may return None
        return tuple(o.astype(d) if d is not None and o.dtype != d else o for o, d in zip(out, ctx.jdtype))
    if out.dtype != ctx.jdtype:
        out = out.astype(ctx.jdtype)
    if out.shape != ctx.shape:
        raise LoweringError(f"lazyxla: lowering of {ctx.op} produced shape {out.shape}, expected {ctx.shape}")
    return out


def _packed(graph: Graph) -> bool:
    n = len(graph.scalars)
    return n > SEPARATE_SCALARS_MAX and n > PACK_SCALARS_PER_OUTPUT * len(graph.outputs)


def _pack_layout(graph: Graph) -> tuple[list, list]:
    """Packed scalars: (kind, element) of each scalar, and the length of each pack."""
    counts = [0] * len(SCALAR_DTYPES)
    layout = []
    for s in graph.scalars:
        k = scalar_kind(s)
        layout.append((k, counts[k]))
        counts[k] += 1
    return layout, counts


def _scalar_slots(graph: Graph, n_params: int) -> dict:
    """id(scalar node) -> (operand position, element of the pack or None)."""
    if not _packed(graph):
        return {id(s): (n_params + i, None) for i, s in enumerate(graph.scalars)}
    layout, _ = _pack_layout(graph)
    return {id(s): (n_params + k, j) for s, (k, j) in zip(graph.scalars, layout)}


def scalar_avals(graph: Graph) -> list:
    """(shape, dtype) of each scalar operand of `graph`'s program."""
    if not _packed(graph):
        return [((), SCALAR_DTYPES[scalar_kind(s)]) for s in graph.scalars]
    _, counts = _pack_layout(graph)
    return [((n,), dt) for n, dt in zip(counts, SCALAR_DTYPES)]


def scalar_args(graph: Graph) -> list:
    """`graph`'s scalar operands: Python numbers, or one array per kind when packed."""
    if not _packed(graph):
        return [_SCALAR_TYPES[scalar_kind(s)](s.data) for s in graph.scalars]
    values: list = [[] for _ in SCALAR_DTYPES]
    for s in graph.scalars:
        values[scalar_kind(s)].append(s.data)
    return [np.asarray(v, dtype=dt) for v, dt in zip(values, SCALAR_DTYPES)]
