"""`torch.autocast("lazyxla", dtype=torch.bfloat16 | torch.float16)`.

With autocast enabled for a device, ops on its tensors first reach the kernel on its
autocast dispatch key (AutocastPrivateUse1 for lazyxla), which casts the inputs and
redispatches below the key. PyTorch registers neither kernels nor a fallthrough there for
PrivateUse1, so this module registers, from Python:
* a fallthrough fallback on AutocastPrivateUse1: ops outside the lists run as usual;
* one kernel per entry of PyTorch's shared op lists (autocast_lists.py), doing what the
  C++ `WrapFunction_` of that entry's `CastPolicy` does (ATen/autocast_mode.h);
* the ban on `binary_cross_entropy` that CUDA, XPU and MPS register beside the lists.
The casts are ordinary `_to_copy` ops recorded into the graph, before autograd.

Design: docs/design.md, "Autocast" and "frontend/autocast.py".
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..ir.ops import register_fact
from .autocast_lists import read_lists
from .device import DEVICE_TYPE
from .tensor import LazyTensor
from .torch_compat import AUTOCAST_KEY as KEY
from .torch_compat import below_autocast

_LIBS: list = []


# at::autocast::is_eligible: a floating tensor on our device (is_autocast_eligible for
# PrivateUse1), and not float64 (never cast down)
_ELIGIBLE_DTYPES = frozenset(d for d in vars(torch).values()
                             if isinstance(d, torch.dtype) and d.is_floating_point and d is not torch.float64)


def _is_eligible(t: Any) -> bool:
    return isinstance(t, LazyTensor) and t.dtype in _ELIGIBLE_DTYPES


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """cached_cast without the cache: eligible tensors, also inside Tensor[] / Tensor?[]."""
    if type(value) is LazyTensor:   # an operand, the usual argument: `_is_eligible` without its frame
        have = value.dtype
        return value.to(dtype) if have is not dtype and have in _ELIGIBLE_DTYPES else value
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if _is_eligible(value) and value.dtype is not dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)([_cast(v, dtype) for v in value])
    return value


def _cast_call(args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple:
    """`_cast` of every argument of an autocast kernel's call: (args, kwargs). One frame per
    argument (an op's kernel runs this at every call under autocast)."""
    return (tuple([_cast(a, dtype) for a in args]),
            {k: _cast(v, dtype) for k, v in kwargs.items()} if kwargs else kwargs)


def _tensors(values) -> list:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(_tensors(v))
    return out


def _lower_dtype() -> torch.dtype:
    return torch.get_autocast_dtype(DEVICE_TYPE)


def _promote_type(args: tuple, kwargs: dict) -> torch.dtype:
    """at::autocast::promote_type: the widest of the eligible inputs, doubles ignored."""
    lower = current = _lower_dtype()
    for t in _tensors(args) + _tensors(kwargs.values()):
        if not _is_eligible(t):
            continue
        if current is torch.float32 or t.dtype is torch.float32:
            current = torch.float32
        elif not (current is lower and t.dtype is lower):
            raise RuntimeError(
                f"lazyxla autocast: {t.dtype} input inside a {lower} autocast region has no common "
                f"type with the other inputs (at::autocast::prioritize); cast it to {lower} or float32 "
                "first, or use the autocast dtype of the region")
    return current


def _first_arg(args: tuple, kwargs: dict) -> Any:
    return args[0] if args else next(iter(kwargs.values()), None)


def _redispatch(op, args: tuple, kwargs: dict):
    with below_autocast():
        return op(*args, **kwargs)


def _lower_precision_fp(op) -> Callable:
    def kernel(*args, **kwargs):
        dtype = _lower_dtype()
        return _redispatch(op, *_cast_call(args, kwargs, dtype))
    return kernel


def _fp32(op) -> Callable:
    def kernel(*args, **kwargs):
        f32 = torch.float32
        return _redispatch(op, *_cast_call(args, kwargs, f32))
    return kernel


def _promote(op) -> Callable:
    def kernel(*args, **kwargs):
        dtype = _promote_type(args, kwargs)
        return _redispatch(op, *_cast_call(args, kwargs, dtype))
    return kernel


def _fp32_set_opt_dtype(op) -> Callable:
    # softmax, sum, cumsum...: an explicit dtype= wins, else float32 (set_opt_dtype)
    schema_args = op._schema.arguments
    slot = next(i for i, a in enumerate(schema_args) if a.name == "dtype")
    positional = not schema_args[slot].kwarg_only

    def kernel(*args, **kwargs):
        if _is_eligible(_first_arg(args, kwargs)):
            if positional and len(args) > slot:
                if args[slot] is None:
                    args = args[:slot] + (torch.float32,) + args[slot + 1:]
            elif kwargs.get("dtype") is None:
                kwargs = dict(kwargs, dtype=torch.float32)
        return _redispatch(op, args, kwargs)
    return kernel


def _fp32_append_dtype(op) -> Callable:
    # norm.Scalar -> norm.ScalarOpt_dtype(..., dtype=float32): the overload whose schema
    # is the registered one plus a trailing `dtype`
    names = [a.name for a in op._schema.arguments] + ["dtype"]
    packet = getattr(torch.ops.aten, op._schema.name.split("::")[1])
    target = next(getattr(packet, o) for o in packet.overloads()
                  if [a.name for a in getattr(packet, o)._schema.arguments] == names)

    def kernel(*args, **kwargs):
        first = _first_arg(args, kwargs)
        dtype = torch.float32 if _is_eligible(first) else first.dtype
        return _redispatch(target, args, dict(kwargs, dtype=dtype))
    return kernel


_POLICIES: dict[str, Callable] = {
    "lower_precision_fp": _lower_precision_fp,
    "fp32": _fp32,
    "fp32_set_opt_dtype": _fp32_set_opt_dtype,
    "fp32_append_dtype": _fp32_append_dtype,
    "promote": _promote,
}


def _binary_cross_entropy_banned(*args, **kwargs):
    raise RuntimeError(
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast.")


def resolve(name: str):
    """"pow.Tensor_Scalar" -> aten.pow.Tensor_Scalar, "mm" -> aten.mm.default."""
    op, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


def kernels() -> dict[str, tuple[str, Callable]]:
    """{registered op name: (policy, kernel)} for every entry of PyTorch's lists."""
    return {name: (policy, _POLICIES[policy](resolve(name))) for name, policy in read_lists()}


def register() -> None:
    """Install the AutocastPrivateUse1 kernels (once per process)."""
    if _LIBS:
        return
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, KEY)
    lib = torch.library.Library("aten", "IMPL")
    for name, (policy, kernel) in kernels().items():
        lib.impl(name, kernel, KEY)
        register_fact(resolve(name), "autocast", policy)
    lib.impl("binary_cross_entropy", _binary_cross_entropy_banned, KEY)
    register_fact(torch.ops.aten.binary_cross_entropy.default, "autocast", "refused")
    _LIBS.extend((fallback, lib))
