"""`torch._foreach_*` ops: one dispatch for a whole list, one node per element.

The optimizer's foreach path costs one Python dispatch per parameter *group*
instead of several per parameter; inside, each element becomes the node of
the matching single-tensor op (resolved once per foreach overload).
"""
from __future__ import annotations

import torch

from ..ir.ops import facts, register_fact
from .primitives import run_op

aten = torch.ops.aten
_RESOLVED: dict = {}
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


def _resolve(func) -> tuple:
    """(single-tensor op, write_back): write_back when an in-place foreach op has only a
    functional single-tensor twin (e.g. _foreach_maximum_ -> maximum, then copy into self)."""
    resolved = _RESOLVED.get(func)
    if resolved is None:
        base = func._schema.name.split("::")[-1]
        name = base[len("_foreach_"):]
        if func in _TARGETS:
            resolved = (_TARGETS[func], False)
        else:
            target = _find(name, func._overloadname)
            if target is not None:
                resolved = (target, False)
            elif name.endswith("_") and _find(name[:-1], func._overloadname) is not None:
                resolved = (_find(name[:-1], func._overloadname), True)
            else:
                raise NotImplementedError(f"lazyxla: no single-tensor op for {func}")
        _RESOLVED[func] = resolved
    return resolved


def _split_positional(target) -> tuple[int, tuple]:
    """(number of positional args of `target`, names of its keyword-only args)."""
    args = target._schema.arguments
    return (sum(1 for a in args if not a.kwarg_only), tuple(a.name for a in args if a.kwarg_only))


def foreach_handler(func, info, args, kwargs):
    target, write_back = _resolve(func)
    n_pos, kw_names = _split_positional(target)
    if len(args) > n_pos:
        # e.g. _foreach_addcmul_(self, t1, t2, value) -> addcmul_(self, t1, t2, *, value)
        kwargs = dict(kwargs, **dict(zip(kw_names, args[n_pos:])))
        args = args[:n_pos]
    n = next(len(a) for a in args if isinstance(a, (list, tuple)))   # the scalar may come first
    inplace = info.name.endswith("_")
    per_element = []
    for a in args:
        if isinstance(a, (list, tuple)) and len(a) == n:
            per_element.append(a)
        else:
            per_element.append(None)
    results = []
    for i in range(n):
        el_args = tuple(a[i] if pa is not None else a for a, pa in zip(args, per_element))
        el_kwargs = {k: (v[i] if isinstance(v, (list, tuple)) and len(v) == n else v) for k, v in kwargs.items()}
        result = run_op(target, el_args, el_kwargs)
        if write_back:
            run_op(aten.copy_.default, (el_args[0], result), {})
        results.append(result)
    if inplace:
        return None
    return results
