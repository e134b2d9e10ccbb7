"""The only IR node type.

A `Node` is an immutable record of one operation: `op` is an ATen `OpOverload`
or one of the internal tags below, `args`/`kwargs` are the call's arguments
with operand nodes in place of tensors, and `inputs` lists those operand nodes
flat (what graph walks follow). `sig` is the node's structural signature: the
op, static arguments and operand shapes/dtypes, never data values, interned to a
small int, so a graph key is a tuple of ints plus wiring. Nodes are made only by
the constructors of ir/build.py, which compute the signature from those parts.

Leaves:
* DATA: `data` is a `DeviceData`; becomes a parameter of the compiled graph.
* SCALAR: `data` is a Python number (or 0-d host tensor value) lifted out of
  the graph so that learning rates and step counts never cause a recompile.

Multi-output ops (e.g. `var_mean`, `max.dim`) produce a node with `nout > 0`
whose `shape`/`dtype` are tuples; consumers read element `i` through a
GETITEM node.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch

from .bounded import BoundedTable

DATA = "data"
SCALAR = "scalar"
GETITEM = "getitem"
OPT_BARRIER = "optimization_barrier"
# args (value, sharding): the value, constrained to a jax.sharding.Sharding (SPMD mode)
SHARDING_CONSTRAINT = "sharding_constraint"
# args (base, new_view_value, view_op, view_args): base with the view's elements replaced
# (an in-place write through a view; frontend/views.py builds it, lower/views.py lowers it)
VIEW_SCATTER = "view_scatter"
# A fused optimizer's whole update (`torch.optim.Adam/AdamW/SGD(fused=True)`): args are
# its ATen call's tensor lists (operand nodes), kwargs its options; one output per tensor
# the kernel writes, in the order ir/fused.py `written` gives (frontend/fused_optim.py
# builds it, lower/fused_optim.py lowers it)
FUSED_ADAM = "fused_adam"
FUSED_SGD = "fused_sgd"


class Node:
    # `origin` ("file:line" of the user's code) is set only while provenance is on
    # (frontend/provenance.py); unset, it costs nothing per node. It is not part of `sig`.
    __slots__ = ("op", "args", "kwargs", "inputs", "shape", "dtype", "sig", "data", "nout", "origin")

    def __init__(self, op: Any, args: tuple, kwargs: dict, inputs: tuple,
                 shape: tuple, dtype: torch.dtype, sig: int, data: Any = None,
                 nout: int = 0) -> None:
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.inputs = inputs
        self.shape = shape
        self.dtype = dtype
        self.sig = sig
        self.data = data
        self.nout = nout

    def __repr__(self) -> str:
        return f"Node({self.op}, shape={list(self.shape) if not self.nout else self.shape}, dtype={self.dtype})"


# Signature ids: never reused (a counter), so a forgotten signature met again gets a new
# id and graph keys that held the old one can never match another signature's.
SIG_TABLE_CAP = 131072
_SIG_IDS = BoundedTable(SIG_TABLE_CAP)    # signature -> id
_SIGS = BoundedTable(SIG_TABLE_CAP)       # id -> signature (explanations)
_next_sid = itertools.count()


def intern_sig(sig) -> int:
    """Small stable int for a structural signature (hashable tuple)."""
    sid = _SIG_IDS.get(sig)
    if sid is None:
        sid = _SIG_IDS.put(sig, next(_next_sid))
        _SIGS.put(sid, sig)
    return sid


def sig_of(sid: int):
    """The structural signature behind an interned id (for explanations); None when the
    bounded table has forgotten it."""
    return _SIGS.get(sid)
