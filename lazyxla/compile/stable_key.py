"""A graph's compile key as a digest that is the same in every process, or None where the
key holds something with no process-independent form.

The in-memory key (sync/collect.py) names each node by its interned signature id, which is
this process's own. The digest renders each signature itself, with a tag per type, from
an allow-list of types whose text is the same in every process (numbers, strings, dtypes,
ops by name, lazyxla's own functions by name, tuples of those); anything else refuses the
digest, so a graph the digest cannot name exactly is never looked up on disk. Ints that
stand for objects of this process refuse it too: a CALL names its program by a key id, so
only programs whose own key renders (`lx.call_jax`'s, which attention uses) are named, by
that key; a captured function's key holds its body's graph key, and a function-made
storage policy's token an id. The digest also covers the donors, the operands' avals, the
backend's compile options, the split setting, the environment (versions, XLA flags, the
device) and lazyxla's own source, so an edited lowering never loads an old executable.

Design: docs/design.md, "A second run skips tracing and lowering".
"""
from __future__ import annotations

import enum
import functools
import hashlib
import os
import types
from typing import Any, Optional

import torch
from jax.tree_util import PyTreeDef

from ..ir.build import OPERAND, TracedKey
from ..ir.graph import Graph
from ..ir.node import sig_of
from ..ir.scalars import scalar_avals


class _Unstable(Exception):
    """The value has no process-independent form."""


_ATOMS = {bool: "b", int: "i", str: "s"}
_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)
_BUILTIN_TYPES = {int: "int", float: "float", bool: "bool", complex: "complex", str: "str", type(None): "None"}
_OPS = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)


def _render(value: Any, out: list) -> None:
    tp = type(value)
    tag = _ATOMS.get(tp)
    if tag is not None:
        out.append(tag + repr(value))
    elif tp is float:
        out.append("f" + value.hex())   # by its bits' value: -0.0 and 0.0 apart
    elif value is None:
        out.append("N")
    elif value is OPERAND:
        out.append("@")
    elif tp is tuple or tp is TracedKey or tp is torch.Size:
        out.append("(" if tp is tuple else ("k(" if tp is TracedKey else "z("))
        for v in value:
            _render(v, out)
        out.append(")")
    elif tp in _TORCH_ENUMS:
        out.append("t" + str(value))
    elif tp is complex:
        out.append(f"c{value.real.hex()},{value.imag.hex()}")
    elif tp is type and value in _BUILTIN_TYPES:
        out.append("T" + _BUILTIN_TYPES[value])
    elif isinstance(value, _OPS):
        out.append("o" + str(value))
    elif tp.__name__ == "OpInfo" and isinstance(getattr(value, "func", None), _OPS):
        out.append("O" + str(value.func))   # one OpInfo per OpOverload (frontend/opinfo.py)
    elif isinstance(value, enum.Enum):
        out.append(f"e{tp.__module__}.{tp.__qualname__}.{value.name}")
    elif value is Ellipsis:
        out.append("E")
    elif tp is types.FunctionType and value.__module__.startswith("lazyxla.") and "<" not in value.__qualname__:
        out.append(f"F{value.__module__}.{value.__qualname__}")   # lazyxla's own: in the source digest
    elif tp is functools.partial:
        _render((value.func, value.args, tuple(sorted(value.keywords.items()))), out)
        out.append("P")
    elif tp is PyTreeDef and "CustomNode" not in str(value):
        out.append("D" + str(value))   # built-in containers only: their text is their structure
    else:
        raise _Unstable(tp.__qualname__)


def _signature_text(sid: int, memo: dict) -> str:
    text = memo.get(sid)
    if text is None:
        sig = sig_of(sid)
        if sig is None:   # forgotten by the bounded table: nothing to render
            raise _Unstable("signature")
        out: list = []
        head = sig[0] if type(sig) is tuple and sig else None
        if type(head) is tuple and len(head) == 2 and head[0] == "call":   # a CALL (ir/build.py `structure`)
            out.append("C" + _program_text(head[1]))
            sig = sig[1:]
        _render(sig, out)
        text = memo[sid] = "\x00".join(out)
    return text


# the keys of the programs a CALL may run and still be named on disk: `lx.call_jax`'s
# (the function, its static arguments, tree and avals) and their gradients'. A captured
# function's key holds its body's graph key, whose signature ids are this process's own.
_NAMED_PROGRAMS = ("call_jax", "call_jax_vjp")


def _program_text(key_id: int) -> str:
    sig = sig_of(key_id)   # ("subprogram", the program's key)
    if sig is None or type(sig[1]) is not tuple or not sig[1] or sig[1][0] not in _NAMED_PROGRAMS:
        raise _Unstable("program")
    out: list = []
    _render(sig[1], out)
    return "\x00".join(out)


_MEMO: dict = {}   # signature id -> its text (ids are never reused)
_MEMO_CAP = 1 << 16


@functools.cache
def _source_digest() -> str:
    """sha256 of lazyxla's own Python source, read once."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode() + b"\x00")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def stable_digest(graph: Graph, donors: tuple, context: tuple) -> Optional[str]:
    """The digest of (graph key, donors, operand avals, `context`), the same in every process
    for the same program, or None where the key holds a process-local value. `context`: the
    compile's other inputs (options, environment), rendered by the same rules."""
    if graph.policy is not None and graph.policy.token[0] == "fn":
        return None   # a policy made from a function is keyed by its id
    if len(_MEMO) > _MEMO_CAP:
        _MEMO.clear()
    device, entries, outputs, *named = graph.key
    out = [_source_digest()]
    try:
        for entry in entries:
            out.append(_signature_text(entry[0], _MEMO))
            _render(entry[1:], out)
        _render((device, outputs, tuple(named), donors, graph.packed_scalars, graph.matmul_precision), out)
        _render(tuple((tuple(d.shape), str(d.stored_dtype)) for d in graph.params), out)
        _render(tuple((tuple(shape), str(dtype)) for shape, dtype in scalar_avals(graph)), out)
        _render(context, out)
    except _Unstable:
        return None
    return hashlib.sha256("\x01".join(out).encode()).hexdigest()
