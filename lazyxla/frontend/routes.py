"""Which route an ATen op takes through lazyxla, and which function implements it.

The route is what `dispatch.classify` chose for the op (its handler), read back
here rather than decided a second time, with the implementing function taken
from the op's record (ir/ops.py): the lowering rule, lazyxla's decomposition or
special handler, PyTorch's decomposition, or the host fallback.
`lx.debug.explain_op` prints it.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..ir.ops import OpRecord, record
from . import fallback, foreach, primitives

aten = torch.ops.aten
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]

# route kinds
LOWERED = "lowered"
DECOMPOSED = "decomposed"
VIEW = "view"
HOST_FALLBACK = "host fallback"
SPECIAL = "special"
FOREACH = "foreach"


class Route:
    """How lazyxla handles one op: `kind` (one of the kinds above), a sentence saying how,
    the implementing function and where it lives, and the op's record."""

    def __init__(self, op: Any, kind: str, how: str, impl: Optional[Callable],
                 then: Optional["Route"] = None) -> None:
        self.op = op
        self.kind = kind
        self.how = how
        self.impl = impl
        self.then = then          # the route of the op this one hands each call to
        self.record: Optional[OpRecord] = record(op)

    @property
    def function(self) -> str:
        fn = self.impl
        return f"{fn.__module__}.{fn.__qualname__}" if fn is not None else "-"

    @property
    def file(self) -> str:
        """`path:line` of the implementing function ('-' when there is none)."""
        fn = inspect.unwrap(self.impl) if self.impl is not None else None
        try:
            path = Path(inspect.getsourcefile(fn))
            line = inspect.getsourcelines(fn)[1]
        except (TypeError, OSError):
            return "-"
        if path.is_relative_to(_PACKAGE_ROOT):   # lazyxla's own files: lazyxla/lower/linalg.py
            path = path.relative_to(_PACKAGE_ROOT)
        return f"{path}:{line}"

    def text(self) -> str:
        lines = [f"{self.op}: {self.kind}", f"  how:      {self.how}",
                 f"  function: {self.function}", f"  file:     {self.file}"]
        if self.record is not None:
            for field, value in self.record.facts().items():
                lines.append(f"  fact:     {field} = {_name(value)}")
        if self.then is not None:
            lines.extend("  " + line for line in self.then.text().splitlines())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Route {self.op}: {self.kind} by {self.function}>"


def _name(value: Any) -> str:
    fn = value[0] if isinstance(value, tuple) and value and callable(value[0]) else value
    if callable(fn) and hasattr(fn, "__qualname__"):
        return f"{fn.__module__}.{fn.__qualname__}"
    return repr(value)


def resolve_op(name: Any) -> Any:
    """An OpOverload from 'aten::addmm', 'aten::add.Tensor', 'addmm', a packet or an overload."""
    if isinstance(name, torch._ops.OpOverload):
        return name
    if isinstance(name, torch._ops.OpOverloadPacket):
        return name.default
    if not isinstance(name, str):
        raise TypeError(f"lazyxla: explain_op expects an op name such as 'aten::addmm' or an ATen op, "
                        f"got {type(name).__name__}")
    namespace, _, rest = name.rpartition("::")
    op_name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace or "aten"), op_name, None)
    if packet is None:
        raise ValueError(f"lazyxla: no op named {name!r}; write it as 'aten::addmm' or 'aten::add.Tensor'")
    overload = overload or "default"
    if overload not in packet.overloads():
        raise ValueError(f"lazyxla: {namespace or 'aten'}::{op_name} has no overload {overload!r}; "
                         f"its overloads are {', '.join(packet.overloads())}")
    return getattr(packet, overload)


def route(op: Any) -> Route:
    """The route `op` takes: classified as the dispatcher classifies it on its first call."""
    func = resolve_op(op)
    info = primitives.op_info(func)
    handler = inspect.unwrap(info.handler)
    rec = record(func)
    if handler is primitives.functional:
        return Route(func, LOWERED, "one IR node, lowered to JAX by its rule", rec.lowering)
    if handler is primitives.view:
        inverse = rec.view_inverse
        how = ("a view of the same storage; writes through it scatter back by "
               + (f"{_name(inverse)}" if inverse else "a constant index map (lower/views.py)"))
        return Route(func, VIEW, how, rec.lowering)
    if handler is primitives.inplace:
        return Route(func, LOWERED, f"in place: a node of {info.functional} written into self",
                     record(info.functional).lowering, route(info.functional))
    if handler is primitives.inplace_decomposed:
        return Route(func, DECOMPOSED, f"in place: the decomposition of {info.functional}, assigned to self",
                     primitives.decomposition_for(info.functional))
    if handler is primitives.out_variant:
        then = route(info.functional)
        return Route(func, then.kind, f"out=: {info.functional}, assigned to out", then.impl, then)
    if handler is primitives.decompose:
        fn = primitives.decomposition_for(func)
        source = ("lazyxla's own decomposition" if rec is not None and rec.decomposition is fn
                  else "PyTorch's decomposition table" if fn != func.decompose
                  else "its CompositeImplicitAutograd kernel")
        return Route(func, DECOMPOSED, f"runs {source} on lazy tensors", fn)
    if handler is primitives.host_fallback:
        return Route(func, HOST_FALLBACK, "no lowering or decomposition: runs eagerly on the CPU "
                     f"(a sync and two transfers per call; counted in lx.metrics '{func._schema.name}')",
                     fallback.run_on_host)
    if handler is foreach.foreach_handler:
        plan = foreach.plan_of(func)
        how = (f"one node of {plan.target} per list element" + (", copied into self" if plan.write_back else "")
               + ("; a call signature met twice replays its plan (frontend/foreach_plans.py)"
                  if plan.mode is not None else ""))
        return Route(func, FOREACH, how, foreach.foreach_handler, route(plan.target))
    return Route(func, SPECIAL, "a handler of its own (more than recording a node)", handler)
