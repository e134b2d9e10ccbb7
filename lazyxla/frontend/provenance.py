"""Where each IR node came from: the user's file and line, recorded when asked for.

Off by default, at no cost per op: the switch replaces the op dispatcher itself
(`tensor.bind_dispatch`), so the plain dispatcher has no flag to test. The switch is the
run-time state's `provenance` mode (lazyxla/state.py), which this module watches. On
(`lx.debug.set_provenance(True)`, `STATE.scoped(provenance=True)`, or LAZYXLA_PROVENANCE=1
at import), each op runs as before
and then the nodes it made are stamped with `file:line` of the first frame outside
lazyxla and torch: the walk starts at the op's output and argument tensors and
stops at nodes that already carry a stamp, so it touches only the new nodes.
Device data and runtime scalars are never stamped (they are made by transfers and
syncs, not by a line of the user's program).

The stamp is `Node.origin`, outside the node's structural signature: the same
program run from another line compiles to the same graph. Recompile explanations,
lowering errors and `lx.debug.ir_text` show it. Ops that autograd runs in its own
thread (the backward pass) have no user frame and stay unstamped.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import torch

from .. import config
from ..ir.node import Node
from ..ir.walk import is_leaf, post_order
from ..lock import LOCK
from ..state import STATE
from .storage import live_devices, live_storages
from .tensor import LazyTensor, bind_dispatch

_INTERNAL = (str(Path(__file__).resolve().parents[1]), str(Path(torch.__file__).resolve().parent))
_internal_files: dict = {}


def _is_internal(filename: str) -> bool:
    internal = _internal_files.get(filename)
    if internal is None:
        internal = _internal_files[filename] = filename.startswith(_INTERNAL) or filename.startswith("<frozen")
    return internal


def user_frame() -> Optional[str]:
    """`file:line` of the innermost frame outside lazyxla and torch, or None (autograd's thread)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def origin_of(node: Node) -> Optional[str]:
    """The node's recorded `file:line`, or None (provenance off, or made outside user code)."""
    return getattr(node, "origin", None)


def _stamped_or_leaf(node: Node) -> bool:
    return is_leaf(node) or hasattr(node, "origin")


def _stamp(roots: list, origin: Optional[str]) -> None:
    for node in post_order(roots, stop=_stamped_or_leaf):
        node.origin = origin


def _tensors(values, out: list) -> list:
    for v in values:
        if type(v) is LazyTensor or isinstance(v, LazyTensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            _tensors(v, out)
    return out


def _with_origin(plain_dispatch):
    """`plain_dispatch` that stamps the nodes each op made with the user's line."""
    def dispatch_with_origin(cls, func, types, args=(), kwargs=None):
        if len(types) > 1:   # torch.compile's fakes: nothing lazy is made
            return plain_dispatch(cls, func, types, args, kwargs)
        with LOCK:   # the stamps too, before a sync in another thread sees the new nodes
            return _stamped(plain_dispatch(cls, func, types, args, kwargs), args, kwargs)
    return dispatch_with_origin


def _stamped(result, args, kwargs):
    """`result` of an op on `args`, once the nodes the op made carry the user's line."""
    tensors = _tensors((result,) if not isinstance(result, (list, tuple)) else result, [])
    _tensors(args, tensors)
    if kwargs:
        _tensors(kwargs.values(), tensors)
    roots = []
    for t in tensors:
        roots.append(t._st.value)
        if t._view is not None:
            roots.append(t.lazy_value())
    _stamp(roots, user_frame())
    return result


def _mark_pending_unknown() -> None:
    """Nodes pending from before provenance was on: stamped as unknown (None), so a later
    op's walk stops at them instead of claiming them for its own line."""
    for device in live_devices():
        _stamp([st.value for st in live_storages(device) if st.value is not None], None)


def follow_mode(plain_dispatch) -> None:
    """Bind the dispatcher the `provenance` mode asks for, now and whenever the mode is set;
    `plain_dispatch` is the dispatcher without provenance. The mode starts as
    LAZYXLA_PROVENANCE says (read here, once: the dispatcher is bound at import)."""
    stamping = _with_origin(plain_dispatch)
    bound = plain_dispatch

    def bind(on: bool) -> None:
        nonlocal bound
        if on and bound is plain_dispatch:
            _mark_pending_unknown()
        bound = stamping if on else plain_dispatch
        bind_dispatch(bound)

    STATE.watch("provenance", bind)
    if config.SETTINGS.provenance:   # LAZYXLA_PROVENANCE
        STATE.set("provenance", True)


def enabled() -> bool:
    return STATE.provenance
