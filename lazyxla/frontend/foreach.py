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
_OVERLOAD_CANDIDATES = {
    "List": ("Tensor", "default"),
    "Scalar": ("Scalar", "Tensor", "default"),
    "ScalarList": ("Scalar", "Tensor", "default"),
    "Tensor": ("Tensor", "default"),
    "ScalarAndTensor": ("Scalar",),   # _foreach_pow(scalar, exponents): capturable Adam's beta ** step
    "default": ("default",),
}
# foreach ops whose single-tensor op has another name
for _name in aten._foreach_norm.overloads():
    register_fact(getattr(aten._foreach_norm, _name), "foreach_target", aten.linalg_vector_norm.default)
del _name
_TARGETS = facts("foreach_target")


def _find(op_name: str, overload: str):
    packet = getattr(aten, op_name, None)
    for name in _OVERLOAD_CANDIDATES.get(overload, ("default",)):
        if packet is not None and name in packet.overloads():
            return getattr(packet, name)
    return None


class _Plan:
    """How one foreach overload runs, decided once: its single-tensor op and that op's
    classification (the element handler, called directly), whether the result is copied
    back into self, how its arguments split into positional and keyword ones, and how a
    planned call's nodes land (foreach_plans.py `mode_of`; None: never planned)."""
    __slots__ = ("func", "target", "info", "write_back", "n_pos", "kw_names", "inplace", "mode")

    def __init__(self, func) -> None:
        self.func = func   # held: keeps id(func), its key in _PLANS, from being reused
        base = func._schema.name.split("::")[-1]
        name = base[len("_foreach_"):]
        target = _TARGETS.get(func)
        write_back = False
        if target is None:
            target = _find(name, func._overloadname)
            if target is None and name.endswith("_"):
                # an in-place foreach op with only a functional single-tensor twin
                # (_foreach_maximum_ -> maximum, then copied into self)
                target, write_back = _find(name[:-1], func._overloadname), True
            if target is None:
                raise NotImplementedError(f"lazyxla: no single-tensor op for {func}")
        args = target._schema.arguments
        self.target, self.info, self.write_back = target, op_info(target), write_back
        self.n_pos = sum(1 for a in args if not a.kwarg_only)
        self.kw_names = tuple(a.name for a in args if a.kwarg_only)
        self.inplace = base.endswith("_")
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
            return None if plan.inplace else results
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
    return None if plan.inplace else results
