"""`lx.jax_op`: a JAX function as a `torch.library` custom op.

The op has three kernels and a backward:
* lazyxla tensors: a lazyxla decomposition (ir/ops.py record) that records the
  function as a CALL node, as `lx.call_jax` does;
* fake tensors (torch.compile, meta): shapes and dtypes from `jax.eval_shape`;
* any other device: the function run eagerly by JAX on host copies (CPU tensors
  go through DLPack), so the op also runs in eager CPU code;
* autograd: a second op, `<name>_vjp`, built the same way over `jax.vjp`, so the
  backward is traced into dynamo graphs too.
Non-tensor arguments are static, as in `lx.call_jax`.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import jax
import torch

from ..ir.ops import register_fact
from ..patches import in_x64
from .call import lookup, record


def jax_op(name: str, fn: Optional[Callable] = None, *, schema: Optional[str] = None):
    """Decorator: `@lx.jax_op("mylib::op")` over a JAX function makes it the custom op
    `torch.ops.mylib.op` and returns it (callable like the function). The schema comes
    from `schema=`, else from torch-style annotations (`x: torch.Tensor, k: float ->
    torch.Tensor`), else every parameter is a Tensor and one Tensor is returned."""
    if fn is None:
        return lambda f: jax_op(name, f, schema=schema)
    if "::" not in name:
        raise ValueError(f"lazyxla: jax_op needs a qualified name 'namespace::name', got {name!r}")
    schema = schema or _schema_of(fn)

    def host(*args, **kwargs):
        return _host_call(fn, args, kwargs)

    host.__name__ = name.split("::")[1]
    op = torch.library.custom_op(name, mutates_args=(), schema=schema)(host)
    op.register_fake(lambda *args, **kwargs: _fake_call(fn, args, kwargs))
    overload = _overload(name)
    register_fact(overload, "decomposition", lambda *args, **kwargs: _tuple_out(record(fn, args, kwargs)))
    vjp = _vjp_op(name, fn, overload._schema)
    n_args = len(overload._schema.arguments)
    kw_names = [a.name for a in overload._schema.arguments if a.kwarg_only]

    def setup_context(ctx, inputs, output):
        ctx.template = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)])

    def backward(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        inputs = [next(saved) if a is None else a for a in ctx.template]
        args, kwargs = inputs[:n_args - len(kw_names)], dict(zip(kw_names, inputs[n_args - len(kw_names):]))
        call, tensors, _ = lookup(fn, tuple(args), kwargs, abstract=True)
        cts = [g if g is not None else torch.zeros(s, dtype=d, device=tensors[0].device)
               for g, (s, _, d) in zip(grads, call.out_specs) if d.is_floating_point]
        results = iter(vjp(cts, *args, **kwargs))
        out = []
        for a in inputs:
            if isinstance(a, torch.Tensor):
                g = next(results)
                out.append(g if a.is_floating_point() else None)
            else:
                out.append(None)
        return tuple(out)

    op.register_autograd(backward, setup_context=setup_context)
    return op


def _overload(name: str):
    ns, op_name = name.split("::")
    return getattr(getattr(torch.ops, ns), op_name).default


def _schema_of(fn: Callable) -> str:
    try:
        return torch.library.infer_schema(fn, mutates_args=())
    except (ValueError, TypeError):
        params = inspect.signature(fn).parameters
        return "(" + ", ".join(f"Tensor {p}" for p in params) + ") -> Tensor"


def _tuple_out(out: Any) -> Any:
    return tuple(out) if isinstance(out, list) else out


def _host_call(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """fn run eagerly by JAX on the tensors' values, results on the first tensor's device."""
    call, tensors, _ = lookup(fn, args, kwargs, abstract=True)
    device = tensors[0].device
    with in_x64():
        outs = call.flat(*[jax.dlpack.from_dlpack(t.detach().cpu().contiguous()) for t in tensors])
        results = [torch.from_dlpack(o).clone().to(device) for o in outs]
    return _tuple_out(jax.tree_util.tree_unflatten(call.out_tree, results))


def _fake_call(fn: Callable, args: tuple, kwargs: dict) -> Any:
    call, tensors, _ = lookup(fn, args, kwargs, abstract=True)
    device = tensors[0].device
    outs = [torch.empty(s, dtype=d, device=device) for s, _, d in call.out_specs]
    return _tuple_out(jax.tree_util.tree_unflatten(call.out_tree, outs))


def _vjp_op(name: str, fn: Callable, schema) -> Callable:
    """`<name>_vjp(cotangents, *args) -> [grad per tensor argument]`; integer tensors get
    zeros, which the backward drops."""
    text = str(schema)
    arguments = text[text.index("(") + 1:text.rindex(") ->")]
    vjp_schema = f"(Tensor[] _cotangents, {arguments}) -> Tensor[]"

    def host(cotangents, *args, **kwargs):
        call, tensors, _ = lookup(fn, args, kwargs, abstract=True)
        diff_in = _floating(tensors)
        program, _ = call.backward(diff_in)
        with in_x64():
            arrays = [jax.dlpack.from_dlpack(t.detach().cpu().contiguous()) for t in list(tensors) + list(cotangents)]
            grads = iter(torch.from_dlpack(g).clone().to(tensors[0].device) for g in program.fn(*arrays))
        return [next(grads) if i in diff_in else torch.zeros_like(t) for i, t in enumerate(tensors)]

    def lazy(cotangents, *args, **kwargs):
        call, tensors, device = lookup(fn, args, kwargs)
        diff_in = _floating(tensors)
        grads = iter(call.insert_vjp(tensors, cotangents, diff_in, device))
        return [next(grads) if i in diff_in else torch.zeros_like(t) for i, t in enumerate(tensors)]

    def fake(cotangents, *args, **kwargs):
        _, tensors, _ = lookup(fn, args, kwargs, abstract=True)
        return [torch.empty_like(t) for t in tensors]

    host.__name__ = name.split("::")[1] + "_vjp"
    op = torch.library.custom_op(name + "_vjp", mutates_args=(), schema=vjp_schema)(host)
    op.register_fake(fake)
    register_fact(_overload(name + "_vjp"), "decomposition", lazy)
    return op


def _floating(tensors) -> tuple[int, ...]:
    return tuple(i for i, t in enumerate(tensors) if t.is_floating_point())
