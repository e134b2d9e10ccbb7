"""A collected graph as a pure JAX function.

The program is built from the graph once per cache miss and holds no IR
nodes and no device buffers (so a cached executable never keeps old data
alive): each node becomes an instruction whose arguments refer to earlier
results by position. Lifted scalars arrive in three packed vectors (float64,
int64, bool), so a step with dozens of hyper-parameters passes three small
arrays instead of dozens.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .._jax import jax_dtype
from ..errors import LoweringError
from ..frontend.views import VIEW_SCATTER
from ..ir.node import DATA, GETITEM, SCALAR, Node
from ..lower.registry import LOWERINGS
from ..lower.views import view_scatter
from ..sync.collect import Graph

PACK_DTYPES = (np.float64, np.int64, np.bool_)


def pack_kind(node: Node) -> int:
    if node.dtype.is_floating_point:
        return 0
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
    rule = LOWERINGS.get(node.op)
    if rule is None:
        raise LoweringError(f"lazyxla: no lowering for {node.op}")
    return rule


def build(graph: Graph) -> tuple[Callable, int]:
    """(fn(*params, f64_pack, i64_pack, bool_pack) -> outputs, number of params)."""
    index = {id(n): i for i, n in enumerate(graph.order)}
    n_params = len(graph.params)
    counts = [0, 0, 0]
    scalar_slot = {}
    for s in graph.scalars:
        k = pack_kind(s)
        scalar_slot[id(s)] = (k, counts[k])
        counts[k] += 1
    param_of = {}
    for i, d in enumerate(graph.params):
        param_of[id(d)] = i
    instrs = []
    for node in graph.order:
        op = node.op
        if op is DATA:
            instrs.append((0, param_of[id(node.data)], None, None, None))
        elif op is SCALAR:
            k, j = scalar_slot[id(node)]
            instrs.append((1, k, j, jax_dtype(node.dtype), None))
        elif op is GETITEM:
            instrs.append((2, index[id(node.inputs[0])], node.args[1], None, None))
        else:
            kwargs = {k: _template(v, index) for k, v in node.kwargs.items()} if node.kwargs else {}
            instrs.append((3, _rule_for(node), _template(node.args, index), kwargs, Ctx(node)))
    outputs = graph.outputs

    def program(*flat):
        params = flat[:n_params]
        packs = flat[n_params:]
        env: list = []
        for kind, a, b, c, ctx in instrs:
            if kind == 0:
                env.append(params[a])
            elif kind == 1:
                env.append(packs[a][b].astype(c))
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


def pack_counts(graph: Graph) -> list:
    """Length of each scalar pack (float64, int64, bool) of `graph`."""
    counts = [0, 0, 0]
    for s in graph.scalars:
        counts[pack_kind(s)] += 1
    return counts


def pack_scalars(graph: Graph) -> list:
    values: list = [[], [], []]
    for s in graph.scalars:
        values[pack_kind(s)].append(s.data)
    return [np.asarray(v, dtype=dt) for v, dt in zip(values, PACK_DTYPES)]
