"""`lx.call_jax`: a JAX function on lazy tensors, recorded as one CALL node.

The call flattens `(args, kwargs)` with JAX's pytree rules. Lazy tensors become
the function's arrays (`jax.Array` leaves too, adopted without a copy by
`from_jax`); every other leaf is static. A call is keyed on `fn` itself, the
static leaves, the treedef and the arrays' shapes and dtypes; the first call
of a key traces `fn` once with `jax.eval_shape` for its outputs, later calls
only insert a node. The node fuses into the pending graph, so the torch ops
around it and `fn` compile into one executable at the next sync.

Autograd: a `torch.autograd.Function` whose backward is another CALL node, the
`jax.vjp` of `fn` (lower/jax_fn.py).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np
import torch
from torch.autograd.function import once_differentiable

from .._jax import jax_dtype, torch_dtype
from ..frontend.tensor import LazyTensor
from ..frontend.tracing import contiguous_strides
from ..ir.bounded import BoundedTable
from ..ir.call import Subprogram
from ..lock import LOCK
from ..state import STATE
from ..lower.jax_fn import flat_function, out_structure, vjp_function
from ..sync.api import eager_run
from ..capture import insert_call
from .buffers import from_jax

_CALLS = BoundedTable(4096)   # key -> JaxCall


class JaxCall:
    """One JAX function at one input signature: its forward program, output tree and
    (made on first use) one backward program per set of inputs that need a gradient."""
    __slots__ = ("key", "name", "flat", "program", "out_tree", "out_specs", "in_avals", "float_out", "_vjps")

    def __init__(self, key: tuple, name: str, flat: Callable, in_avals: list) -> None:
        self.key = key
        self.name = name
        self.flat = flat
        self.in_avals = in_avals          # (shape, torch dtype) per array operand
        out_tree, out_avals = out_structure(flat, [(s, jax_dtype(d)) for s, d in in_avals])
        self.out_tree = out_tree
        specs = []
        for shape, dtype in out_avals:
            try:
                tdtype = torch_dtype(dtype)
            except KeyError:
                raise TypeError(f"lazyxla: call_jax: {name} returned a {dtype} array, which has no torch "
                                "dtype on lazyxla; cast it inside the function (e.g. .astype(jnp.float32))") from None
            specs.append((shape, contiguous_strides(shape), tdtype))
        self.out_specs = specs
        self.float_out = tuple(d.is_floating_point for _, _, d in specs)
        self.program = Subprogram(flat, key, name, [(s, d) for s, _, d in specs], user_jax=True)
        self._vjps: dict = {}

    def insert(self, tensors: Sequence[LazyTensor], device: int) -> list[LazyTensor]:
        return _settled(insert_call(self.program, [t.checked_value() for t in tensors], self.out_specs, device))

    def backward(self, diff_in: tuple[int, ...]) -> tuple[Subprogram, list]:
        """(program, out specs) of the vjp for the inputs `diff_in`."""
        found = self._vjps.get(diff_in)
        if found is None:
            diff_out = [j for j, f in enumerate(self.float_out) if f]
            out_avals = [(s, jax_dtype(d)) for s, _, d in self.out_specs]
            fn = vjp_function(self.flat, len(self.in_avals), diff_in, diff_out, out_avals)
            avals = [self.in_avals[i] for i in diff_in]
            specs = [(s, contiguous_strides(s), d) for s, d in avals]
            program = Subprogram(fn, ("call_jax_vjp", self.key, diff_in), f"vjp[{self.name}]", avals, user_jax=True)
            found = self._vjps[diff_in] = (program, specs)
        return found

    def insert_vjp(self, tensors: Sequence[LazyTensor], grads: Sequence[torch.Tensor], diff_in: tuple[int, ...],
                   device: int) -> list[LazyTensor]:
        """Gradients of the inputs `diff_in` given `grads`, one per floating output (a
        backward CALL node recomputing the forward)."""
        program, specs = self.backward(diff_in)
        floats = [d for f, (_, _, d) in zip(self.float_out, self.out_specs) if f]
        cts = [g if g.dtype == d else g.to(d) for g, d in zip(grads, floats)]
        operands = [t.checked_value() for t in tensors] + [g.lazy_value() for g in cts]
        return _settled(insert_call(program, operands, specs, device))


def _settled(outs: list[LazyTensor]) -> list[LazyTensor]:
    """In eager mode (lx.experimental.eager_mode) a call runs when made, as an op does;
    inside a dispatched op (a `jax_op`) the dispatcher runs it."""
    if STATE.eager and not STATE.eager_depth:
        eager_run([t._st for t in outs])
    return outs


class _CallJaxFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, call: JaxCall, device: int, *tensors: LazyTensor):
        outs = call.insert(tensors, device)
        ctx.call, ctx.device = call, device
        ctx.save_for_backward(*tensors)
        ctx.mark_non_differentiable(*[o for o, f in zip(outs, call.float_out) if not f])
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        tensors = ctx.saved_tensors
        call: JaxCall = ctx.call
        diff_in = tuple(i for i, need in enumerate(ctx.needs_input_grad[2:]) if need)
        results = call.insert_vjp(tensors, [g for g, f in zip(grads, call.float_out) if f], diff_in, ctx.device)
        out: list[Optional[torch.Tensor]] = [None] * len(tensors)
        for i, r in zip(diff_in, results):
            out[i] = r
        return (None, None, *out)


def _static_key(leaf: Any, name: str) -> tuple:
    try:
        hash(leaf)
    except TypeError:
        raise TypeError(
            f"lazyxla: call_jax({name}): the static argument {leaf!r:.60} ({type(leaf).__name__}) is not "
            "hashable, and static arguments key the compiled program. Pass arrays as lazy tensors "
            "(t.to(lx.device()) or lx.from_jax), or bind the value into the function once "
            "(functools.partial) and reuse that function.") from None
    return (type(leaf), leaf)


def _split(leaves: list, name: str, abstract: bool = False) -> tuple[list, list, list]:
    """(array positions, tensors, static leaves) of the call's leaves. `abstract`: any
    torch tensor is an array (fake tensors tracing a `jax_op` for torch.compile)."""
    positions, tensors, statics = [], [], []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, jax.Array) and not abstract:
            leaf = from_jax(leaf)
        if isinstance(leaf, LazyTensor) or (abstract and isinstance(leaf, torch.Tensor)):
            positions.append(i)
            tensors.append(leaf)
        elif isinstance(leaf, torch.Tensor):
            raise TypeError(f"lazyxla: call_jax({name}) got a {leaf.device} tensor; only lazyxla tensors "
                            "become JAX arrays: move it with t.to(lx.device()) first")
        elif isinstance(leaf, np.ndarray):
            raise TypeError(f"lazyxla: call_jax({name}) got a numpy array; pass it as a lazy tensor "
                            "(torch.from_numpy(a).to(lx.device())) or close over it in the function")
        else:
            statics.append(leaf)
    return positions, tensors, statics


def _function_name(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None) or type(fn).__name__


def lookup(fn: Callable, args: tuple, kwargs: dict, abstract: bool = False) -> tuple[JaxCall, list, int]:
    """(the JaxCall of this call, its tensors, their lazyxla device). `abstract`: the
    tensors may be any torch tensors (only shapes and dtypes are read; device None)."""
    name = _function_name(fn)
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    positions, tensors, statics = _split(leaves, name, abstract)
    if not tensors:
        raise ValueError(f"lazyxla: call_jax({name}) got no lazy tensor: nothing tells it the device. "
                         "Pass at least one lazyxla tensor (or call the JAX function directly).")
    device = None if abstract else tensors[0]._st.device
    if not abstract and any(t._st.device != device for t in tensors):
        raise ValueError(f"lazyxla: call_jax({name}) got tensors on several lazyxla devices; move them to one")
    in_avals = [(tuple(t.shape), t.dtype) for t in tensors]
    key = ("call_jax", fn, treedef, tuple(positions), tuple(_static_key(s, name) for s in statics),
           tuple(in_avals))
    call = _CALLS.get(key)
    if call is None:
        flat = flat_function(fn, treedef, positions, statics, [jax_dtype(d) for _, d in in_avals])
        call = _CALLS.put(key, JaxCall(key, name, flat, in_avals))
    return call, tensors, device


def record(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """`call_jax` without autograd: the CALL node and fn's output pytree of lazy tensors."""
    call, tensors, device = lookup(fn, args, kwargs)
    return jax.tree_util.tree_unflatten(call.out_tree, call.insert(tensors, device))


def call_jax(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` with lazy tensors as JAX arrays, recorded into the pending graph.

    Returns `fn`'s output pytree with lazy tensors for its arrays. No sync and no copy:
    at the next sync the torch ops and `fn` compile into one executable. Gradients flow
    to every input that requires grad, through `jax.vjp`. Under `torch.compile` the call
    runs between compiled graphs (a graph break: dynamo skips lazyxla's runtime modules,
    dynamo/__init__.py), still into the same pending graph; a `lx.jax_op` is traced into
    dynamo's graph instead.
    """
    with LOCK:   # one call is atomic with respect to syncs in other threads, as a traced op is
        call, tensors, device = lookup(fn, args, kwargs)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            if any(t.requires_grad and t.dtype.is_complex for t in tensors):
                raise NotImplementedError(
                    f"lazyxla: call_jax({call.name}): gradients of complex inputs are not supported (JAX and "
                    "torch differ in their complex gradient conventions); detach() them or split real and imag")
            outs = _CallJaxFunction.apply(call, device, *tensors)
        else:
            outs = call.insert(tensors, device)
    return jax.tree_util.tree_unflatten(call.out_tree, list(outs))
