"""`torch._foreach_*` ops: one dispatch for a whole list, one node per element.

The optimizer's foreach path costs one Python dispatch per parameter *group*
instead of several per parameter; inside, each element becomes the node of
the matching single-tensor op (resolved once per foreach overload). A call
signature met before replays its plan (foreach_plans.py) instead of running
the single-tensor handler per element: the same nodes, without converting and
keying each element again.
"""
from __future__ import annotations

from itertools import repeat

import torch

from ..ir.ops import facts, register_fact
from . import foreach_plans
from .primitives import op_info, run_op

aten = torch.ops.aten
# foreach ops whose single-tensor op has another name: _foreach_norm, and maximum/minimum with
# a number, which eager computes as clamp_min/clamp_max (maximum/minimum take tensors only)
for _name in aten._foreach_norm.overloads():
    register_fact(getattr(aten._foreach_norm, _name), "foreach_target", aten.linalg_vector_norm.default)
for _foreach, _target in (("maximum", "clamp_min"), ("minimum", "clamp_max")):
    for _suffix in ("", "_"):
        for _name in ("Scalar", "ScalarList"):
            register_fact(getattr(getattr(aten, f"_foreach_{_foreach}{_suffix}"), _name), "foreach_target",
                          getattr(aten, f"{_target}{_suffix}").default)
del _name, _foreach, _target, _suffix
_TARGETS = facts("foreach_target")


def _element_types(func) -> list:
    """The types of a foreach overload's arguments as one element takes them (a list's
    element type for a list: Tensor[] -> Tensor, Scalar[] -> Scalar)."""
    return [str(a.type.getElementType() if isinstance(a.type, torch.ListType) else a.type)
            for a in func._schema.arguments]


def _find(op_name: str, func):
    """The overload of `aten.<op_name>` that takes one element of `func`'s arguments: the
    same types in order, any further arguments with defaults (fewest of those first), so
    that `_foreach_pow.Scalar` finds pow.Tensor_Scalar, not pow.Scalar (a number's power)."""
    packet = getattr(aten, op_name, None)
    if packet is None:
        return None
    wanted = _element_types(func)
    found = []
    for name in packet.overloads():
        cand = getattr(packet, name)
        args = cand._schema.arguments
        if (len(args) >= len(wanted) and [str(a.type) for a in args[:len(wanted)]] == wanted
                and all(a.has_default_value() for a in args[len(wanted):])):
            found.append((len(args), name, cand))
    return min(found, key=lambda f: f[:2])[2] if found else None


class _Plan:
    """How one foreach overload runs, decided once: its single-tensor op and that op's
    classification (the element handler, called directly), whether the result is copied
    back into self, how its arguments split into positional and keyword ones, and how a
    planned call's nodes land (foreach_plans.py `mode_of`; None: never planned)."""
    __slots__ = ("func", "target", "info", "write_back", "n_pos", "kw_names", "void", "mode")

    def __init__(self, func) -> None:
        self.func = func   # held: keeps id(func), its key in _PLANS, from being reused
        base = func._schema.name.split("::")[-1]
        name = base[len("_foreach_"):]
        target = _TARGETS.get(func)
        write_back = False
        if target is None:
            target = _find(name, func)
            if target is None and name.endswith("_"):
                # an in-place foreach op with only a functional single-tensor twin
                # (_foreach_maximum_ -> maximum, then copied into self)
                target, write_back = _find(name[:-1], func), True
            if target is None:
                raise NotImplementedError(
                    f"lazyxla: {func} is not supported: no single-tensor op takes one element of its "
                    f"arguments ({', '.join(_element_types(func))}); call the single-tensor op per element")
        args = target._schema.arguments
        self.target, self.info, self.write_back = target, op_info(target), write_back
        self.n_pos = sum(1 for a in args if not a.kwarg_only)
        self.kw_names = tuple(a.name for a in args if a.kwarg_only)
        self.void = not func._schema.returns   # in place or out=: the call returns nothing
        self.mode = foreach_plans.mode_of(self.info.handler, write_back)


# id(foreach OpOverload) -> its _Plan (by id: OpOverload's __hash__ is a Python call)
_PLANS: dict = {}


def plan_of(func) -> _Plan:
    plan = _PLANS.get(id(func))
    if plan is None:
        plan = _PLANS[id(func)] = _Plan(func)
    return plan


def foreach_handler(func, info, args, kwargs):
    plan = plan_of(func)
    target, element, handler = plan.target, plan.info, plan.info.handler
    if len(args) > plan.n_pos:
        # e.g. _foreach_addcmul_(self, t1, t2, value) -> addcmul_(self, t1, t2, *, value)
        kwargs = dict(kwargs, **dict(zip(plan.kw_names, args[plan.n_pos:])))
        args = args[:plan.n_pos]
    n = next(len(a) for a in args if isinstance(a, (list, tuple)))   # the scalar may come first
    key = foreach_plans.call_key(plan, args, kwargs, n)
    if key is not None:
        planned = foreach_plans.PLANS.get(key)
        if planned is not None:
            results = foreach_plans.replay(plan, planned, args, kwargs, n)
            return None if plan.void else results
    # one column per argument: a list of n gives an element each, anything else repeats
    columns = [a if isinstance(a, (list, tuple)) and len(a) == n else repeat(a, n) for a in args]
    per_element_kw = [k for k, v in kwargs.items() if isinstance(v, (list, tuple)) and len(v) == n]
    results, elements = [], []
    for i, el_args in enumerate(zip(*columns)):
        el_kwargs = kwargs if not per_element_kw else dict(kwargs, **{k: kwargs[k][i] for k in per_element_kw})
        result = handler(target, element, el_args, el_kwargs)
        if plan.write_back:
            run_op(aten.copy_.default, (el_args[0], result), {})
        results.append(result)
        elements.append((el_args, el_kwargs))
    if key is not None:
        foreach_plans.met(plan, key, elements)
    return None if plan.void else results
