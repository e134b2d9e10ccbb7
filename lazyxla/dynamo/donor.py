"""`torch.ops.lazyxla.set_buffer_donor_(t, donate)`: explicit donation as a torch op.

Outside compiled code it is `lx.set_buffer_donation(t, donate)` and returns `t`.

Inside a compiled function it must keep eager's meaning (mark the buffer `t`
holds *at that point*) through AOTAutograd's functionalization, which rewrites
in-place updates into new values. Two ops make that work:

* `set_buffer_donor_(Tensor t, bool donate) -> Tensor` is what users call. The
  backend (backend.py) rewrites every call in dynamo's graph, before
  AOTAutograd sees it, into `_mark_donor(t, donate)` and replaces the result by
  `t` itself, so later in-place ops on the result update `t` as in eager.
* `_mark_donor(Tensor t, bool donate) -> ()` survives functionalization as a
  side-effecting op whose operand is `t`'s value at that point of the program:
  the unmodified input (then it becomes a directive of the captured program,
  applied to the real input before each call, capture/function.py) or a value
  computed inside (pending computation: nothing to mark, as
  `lx.set_buffer_donation` returns False for it).
"""
from __future__ import annotations

import torch
from torch.fx.node import has_side_effect

from ..donation import set_buffer_donation
from ..ir.node import DATA
from ..ir.ops import register_fact
from ..capture import Placeholder

_LIB = torch.library.Library("lazyxla", "DEF")
_LIB.define("set_buffer_donor_(Tensor t, bool donate) -> Tensor")
_LIB.define("_mark_donor(Tensor t, bool donate) -> ()")

SET_BUFFER_DONOR = torch.ops.lazyxla.set_buffer_donor_.default
MARK_DONOR = torch.ops.lazyxla._mark_donor.default


def _set_buffer_donor(func, info, args, kwargs):
    """Lazy-tensor handler of both ops (frontend dispatch)."""
    t, donate = _arguments(args, kwargs)
    node = t.lazy_value()
    if node.op is DATA and isinstance(node.data, Placeholder):
        # An input of a function being captured: a directive for every call.
        node.data.directive = bool(donate)
    else:
        set_buffer_donation(t, bool(donate))
    return t if func is SET_BUFFER_DONOR else None


def _arguments(args, kwargs) -> tuple:
    t = args[0] if args else kwargs["t"]
    donate = args[1] if len(args) > 1 else kwargs["donate"]
    return t, donate


def _non_lazy(t: torch.Tensor, donate: bool):
    set_buffer_donation(t, donate)   # raises the API's TypeError for a non-lazyxla tensor


def register() -> None:
    register_fact(SET_BUFFER_DONOR, "special", _set_buffer_donor)
    register_fact(MARK_DONOR, "special", _set_buffer_donor)
    # Fake (meta) kernels: what dynamo and AOTAutograd run while tracing.
    _LIB.impl("set_buffer_donor_", lambda t, donate: t.clone(), "Meta")
    _LIB.impl("_mark_donor", lambda t, donate: None, "Meta")
    # CPU and other devices: the API's clear error.
    _LIB.impl("set_buffer_donor_", lambda t, donate: _non_lazy(t, donate), "CompositeExplicitAutograd")
    _LIB.impl("_mark_donor", _non_lazy, "CompositeExplicitAutograd")
    for op in (SET_BUFFER_DONOR, MARK_DONOR):
        has_side_effect(op)   # never dead-code-eliminated: its result is usually unused


def is_donor_call(target) -> bool:
    return target is SET_BUFFER_DONOR or target is torch.ops.lazyxla.set_buffer_donor_

