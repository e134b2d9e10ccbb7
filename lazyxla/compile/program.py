"""A collected graph as a pure JAX function.

The program is built from the graph once per cache miss and holds no IR
nodes and no device buffers (so a cached executable never keeps old data
alive): each node becomes an instruction whose arguments refer to earlier
results by position.

Lifted scalars reach the program as ir/scalars.py packs them (separate 0-d
operands, or one vector per kind) and are cast to the node's dtype inside.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Callable, Optional

import jax.numpy as jnp
import torch
from jax import lax

from .._jax import jax_dtype
from ..errors import LoweringError
from ..ir.call import Subprogram
from ..ir.node import DATA, GETITEM, SCALAR, Node
from ..ir.scalars import NARROWED_TRAVEL, scalar_slots
from ..lower._packs import PackReader
from ..lower._precision import LEVELS
from ..lower._util import cast, opmath
from ..lower.registry import LOWERINGS
from .without_x64 import without_x64
from ..ir.graph import Graph, positions


# the torch dtypes whose JAX types exist only in JAX's x64 mode
WIDE_DTYPES = (torch.int64, torch.uint64, torch.float64, torch.complex128)


class Kind(IntEnum):
    """What one instruction of a program does."""
    PARAM = 0         # a device buffer from the operands, cast when stored otherwise
    SCALAR = 1        # a lifted scalar operand (or a pack reference into one)
    GETITEM = 2       # one output of a multi-output node
    APPLY = 3         # a lowering rule over earlier results
    REUSE = 4         # an earlier result again (a merged scalar read once)


class Ctx:
    """What a rule may know about its node's output. `jdtype` is its device dtype: the
    JAX type of `dtype`, or under a storage dtype policy (`storage`, the graph's
    `policy.storage`) the JAX type of the narrower storage dtype, which the rule's
    result is cast to (runtime/storage_dtypes.py). `precision` is the `lax.Precision` of
    matrix products, the graph's `lx.set_matmul_precision` level (lower/_precision.py)."""
    __slots__ = ("shape", "dtype", "jdtype", "op", "origin", "precision")

    def __init__(self, node: Node, storage: Optional[Callable] = None,
                 precision: lax.Precision = lax.Precision.HIGHEST) -> None:
        self.precision = precision
        self.shape = node.shape
        self.dtype = node.dtype
        self.op = node.op
        self.origin = getattr(node, "origin", None)   # the user's file:line, with provenance on
        device = _identity if storage is None else storage
        self.jdtype = tuple(jax_dtype(device(d)) if d is not None else None for d in node.dtype) if node.nout \
            else jax_dtype(device(node.dtype))


def _identity(dtype):
    return dtype


class _Ref:
    __slots__ = ("pos",)

    def __init__(self, pos: int) -> None:
        self.pos = pos


class _PackRef:
    """A packed scalar read as `dtype`: in the env until a rule first uses it (the
    node's own dtype), or in a rule's arguments (the rule's compute dtype)."""
    __slots__ = ("operand", "element", "dtype")

    def __init__(self, operand: int, element: int, dtype) -> None:
        self.operand, self.element, self.dtype = operand, element, dtype


def _template(value, index: dict, packed: dict, compute):
    if isinstance(value, Node):
        slot = packed.get(id(value)) if compute is not None else None
        return _PackRef(slot[0], slot[1], compute) if slot is not None else _Ref(index[id(value)])
    if isinstance(value, tuple):
        return tuple(_template(v, index, packed, compute) for v in value)
    return value


def _resolve(value, env: list, packs: PackReader):
    if type(value) is _Ref:
        v = env[value.pos]
        if type(v) is _PackRef:
            v = env[value.pos] = packs.read(v.operand, v.element, v.dtype)
        return v
    if type(value) is _PackRef:
        return packs.read(value.operand, value.element, value.dtype)
    if type(value) is tuple:
        return tuple(_resolve(v, env, packs) for v in value)
    return value


def _rule_for(node: Node, position: int, x64: bool) -> Callable:
    """The node's lowering rule. `x64`: whether the graph holds some 64-bit type as itself.
    Where its policy holds them all in 32 bits (the TPU's rule), a user's JAX function and
    a rule that runs one of JAX's own algorithms (lower/_util.py `jax_algorithm`) are traced
    and lowered out of x64 (compile/without_x64.py), as JAX runs on that platform: Python
    ints and `arange`s are 32-bit there, Pallas kernels lower (Mosaic refuses the int64
    block indices x64 makes), and the TPU's SVD compiles."""
    if type(node.op) is Subprogram:
        rule, from_jax = node.op.rule, node.op.user_jax
    else:
        rule = LOWERINGS.get(node.op)
        if rule is None:
            error = LoweringError(f"lazyxla: no lowering for {node.op}")
            error.node_position = position
            raise error
        from_jax = getattr(rule, "jax_algorithm", False)
    return without_x64(rule) if from_jax and not x64 else rule


def build(graph: Graph) -> tuple[Callable, int]:
    """(fn(*params, *scalar_operands) -> outputs, number of params)."""
    index = positions(graph)
    n_params = len(graph.params)
    scalar_slot = scalar_slots(graph, n_params)
    param_of = {}
    for i, d in enumerate(graph.params):
        param_of[id(d)] = i
    # packed scalars: a rule that casts its operands to its compute dtype first gets them
    # read from the pack converted once (see lower/_packs.py)
    # (so are merged scalars, which many nodes read: sync/collect.py)
    merged = graph.merged_scalars is not None
    packed = {k: v for k, v in scalar_slot.items() if merged or v[1] is not None}
    storage = graph.policy.storage if graph.policy is not None else None
    x64 = storage is None or any(storage(d) == d for d in WIDE_DTYPES)
    precision = LEVELS[graph.matmul_precision]   # the level the graph was collected at
    scalar_dtype = _scalar_read_dtype(graph)
    instrs = []
    scalar_reads: dict = {}   # (operand, element, dtype) -> its first read's position in env
    for position, node in enumerate(graph.order):
        op = node.op
        if op is DATA:
            # a buffer stored otherwise than the graph's policy says (made under another
            # policy) enters converted, so the whole graph computes in the policy's types
            device = storage(node.dtype) if storage is not None else node.dtype
            instrs.append((Kind.PARAM, param_of[id(node.data)], None if device == node.data.stored_dtype else jax_dtype(device),
                           None, None))
        elif op is SCALAR:
            operand, element = scalar_slot[id(node)]
            read = (operand, element, scalar_dtype(node.dtype))
            first = scalar_reads.setdefault(read, position)
            # merged scalars (sync/collect.py) share an operand: read and cast it once
            instrs.append((Kind.SCALAR, *read, None) if first == position else (Kind.REUSE, first, None, None, None))
        elif op is GETITEM:
            instrs.append((Kind.GETITEM, index[id(node.inputs[0])], node.args[1], None, None))
        else:
            rule, ctx = _rule_for(node, position, x64), Ctx(node, storage, precision)
            compute = opmath(ctx.jdtype) if packed and getattr(rule, "casts_to_compute", False) \
                and not isinstance(ctx.jdtype, tuple) else None
            if compute is not None and jnp.issubdtype(compute, jnp.complexfloating):
                compute = None   # complex chains read this way exhausted XLA's memory (20+ GB)
            kwargs = {k: _template(v, index, packed, compute) for k, v in node.kwargs.items()} if node.kwargs else {}
            instrs.append((Kind.APPLY, rule, _template(node.args, index, packed, compute), kwargs, ctx))
    outputs = graph.outputs

    def program(*flat):
        env: list = []
        packs = PackReader(flat)
        for kind, a, b, c, ctx in instrs:
            if kind is Kind.PARAM:
                env.append(flat[a] if b is None else cast(flat[a], b))
            elif kind is Kind.SCALAR:
                env.append(cast(flat[a], c) if b is None else _PackRef(a, b, c))
            elif kind is Kind.GETITEM:
                env.append(env[a][b])
            elif kind is Kind.REUSE:
                env.append(env[a])
            else:
                try:
                    env.append(_apply(a, ctx, _resolve(b, env, packs),
                                      {k: _resolve(v, env, packs) for k, v in c.items()}))
                except LoweringError as e:
                    # which node failed, for the sync that contains it (sync/failures.py);
                    # set last by the outermost program when programs nest (CALL nodes)
                    e.node_position = len(env)
                    raise
        return tuple(_resolve(_Ref(p), env, packs) for p in outputs)

    return program, n_params


def _scalar_read_dtype(graph: Graph) -> Callable:
    """The JAX dtype each lifted scalar is read as: its node's dtype, or where the graph's
    storage policy narrows that, the 32 bits its kind travels in (ir/scalars.py: a float
    held in 16 bits is still read as float32, as an op's opmath would take it), except
    that complex Python scalars (complex128)
    are read as complex64 in a graph without a complex128 tensor. Same values: by eager's
    wrapped-number rule the scalar takes the dtype of the op's tensors, so every op that
    reads it would convert it to complex64 anyway. Read this way the program has no
    complex128 <-> complex64 convert, on which the TPU compiler aborts the process
    (lower/_util.py complex_cast; the read itself converts part by part)."""
    storage = graph.policy.storage if graph.policy is not None else _identity
    narrow_complex = any(n.dtype == torch.complex128 for n in graph.scalars) and not any(
        n.op is not SCALAR and torch.complex128 in (n.dtype if n.nout else (n.dtype,)) for n in graph.order)

    def read_dtype(dtype: torch.dtype):
        if narrow_complex and dtype == torch.complex128:
            return jnp.complex64
        narrowed = storage(dtype)
        return jax_dtype(dtype) if narrowed == dtype else jnp.dtype(NARROWED_TRAVEL[narrowed])

    return read_dtype


def _apply(rule: Callable, ctx: Ctx, args: tuple, kwargs: dict):
    try:
        out = rule(ctx, *args, **kwargs)
    except LoweringError:
        raise
    except Exception as e:
        made = f" (made at {ctx.origin})" if ctx.origin else ""
        raise LoweringError(f"lazyxla: lowering {ctx.op}{made} failed: {type(e).__name__}: {e}") from e
    if isinstance(ctx.jdtype, tuple):
        # d is None: an output the op was asked not to compute; the rule may return None
        return tuple(cast(o, d) if d is not None and o.dtype != d else o for o, d in zip(out, ctx.jdtype))
    if out.dtype != ctx.jdtype:
        out = cast(out, ctx.jdtype)
    if out.shape != ctx.shape:
        raise LoweringError(f"lazyxla: lowering of {ctx.op} produced shape {out.shape}, expected {ctx.shape}")
    return out
