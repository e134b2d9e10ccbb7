"""`scan(fn, init, xs)`: a Python loop over the leading dimension as one XLA loop
(PyTorch/XLA's `torch_xla.experimental.scan`, API.md "Big models").

`fn(carry, x) -> (new_carry, y)` is traced once, on placeholders shaped like
the carry and one slice of `xs`, into a pure JAX body (sync/capture.py). One
CALL node then runs that body over the leading dimension in a `lax.scan` and
fuses into the step graph at the next sync, like gradient accumulation does.
Tracing and compile cost are one iteration's, whatever the length.

Autograd. The loop is one `torch.autograd.Function` whose inputs are the
leaves of `init` and `xs` and every leaf tensor that `fn` closes over and that
requires grad (found by walking the autograd graph the traced iteration
built: the `AccumulateGrad` nodes it reaches that are not placeholders). Its
backward is a second loop, in reverse: per iteration it re-runs `fn` on that
iteration's saved carry and takes the vector-Jacobian product with torch's
own autograd inside a second captured body, so gradients follow PyTorch's
derivative formulas exactly as the plain Python loop would.

Options considered for the backward:
- save every iteration's activations (AOTAutograd's partition, PyTorch/XLA's
  default): no second forward, but activation memory grows with the length;
- differentiate the lowered JAX body with `jax.vjp`: no second trace, but
  gradients then follow JAX's formulas (ties in max, kinks at 0), which can
  differ from eager's;
- re-run the iteration in the backward (the default): memory for the carries
  only (N x carry, as activation checkpointing of every iteration), one extra
  forward per iteration, torch's formulas.

`rematerialize=False` gives the first option with torch's formulas: the forward
trace records, through `saved_tensors_hooks`, every tensor autograd saves; those
computed inside `fn` from its inputs (a layer norm's mean and rstd too, which have
no grad_fn) become extra outputs of the body (residuals), stacked by the forward
loop; the backward's re-trace hands autograd the residuals in their place, so its
re-run forward is dead code that the capture drops. Measured on the reference GPT
at 32 layers (2-core CPU, AdamW, stacked layers, quiet machine): a step takes
1.50 s saving and 1.35 s re-running (eager: 1.02 s), while the peak device memory
is 1.2 GB saving and 0.5 GB re-running. Saving writes 22 MB of residuals per
layer into stacked buffers (zero-filled first, as `lax.scan` builds its outputs)
and reads them back; on this CPU that memory traffic costs more than one layer's
forward again, hence the default.

Random ops get a seed per call, mixed with the iteration index, and the
backward replays the same seeds, so its recomputation sees the forward's
random values (saving activations, a dropout mask is a residual instead).

`scan_layers(layers, *inputs)` stacks the layers' parameters and buffers
along a new leading dimension (one traced op per tensor name, whatever the
depth) and scans `torch.func.functional_call` of the first layer over them.
The stack's backward is one `unbind` per tensor name, handing each layer its
own `.grad`; autograd then stores each of them (one `detach` per parameter
tensor, the only traced work that grows with depth).
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable, Hashable, NamedTuple, Optional, Sequence
from weakref import WeakKeyDictionary

import jax.numpy as jnp
import torch
from jax import lax
from torch.utils._pytree import tree_flatten, tree_unflatten

from .._jax import jax_dtype
from ..frontend.tensor import LazyTensor
from ..frontend.tracing import contiguous_strides
from ..ir.call import Subprogram, call_node
from ..ir.graph import data_reachable
from ..ir.node import OPT_BARRIER, Node, getitem_node, intern_sig
from ..sync.capture import Capture, CaptureError, capture, insert_call
from ._leaves import require_lazy
from .gradient_accumulation import _SEED_MIX


class ScanError(ValueError):
    """Bad input to scan / scan_layers (the message names the problem and the fix)."""


# -- the public functions -------------------------------------------------------------

# fn -> {structural key: _Trace}: the traces of pure functions (is_fn_pure=True).
_TRACES: WeakKeyDictionary = WeakKeyDictionary()


def scan(fn: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any, *,
         is_fn_pure: bool = False, rematerialize: bool = True) -> tuple[Any, Any]:
    """`(final_carry, ys)`: `fn` applied along dim 0 of `xs`, threading the carry;
    equal to the Python loop, in one compiled loop (module docstring).

    `is_fn_pure=True` promises that `fn`'s traced ops depend only on the shapes and
    dtypes of its arguments (not on Python state or on which outer tensors it reads):
    its forward and backward iterations are then traced at the first call and reused
    by later calls with the same structure, whatever the length.

    `rematerialize=True` (the default) keeps no activations: the backward re-runs
    each iteration from its saved carry (one more forward per iteration, memory for
    the carries only). `rematerialize=False` has the forward loop save what autograd
    needs, stacked per iteration, and the backward only reads it (PyTorch/XLA's
    default; module docstring for the measured trade-off)."""
    return scan_cached(fn, init, xs, _trace_cache(fn) if is_fn_pure else None, rematerialize=rematerialize)


def _trace_cache(fn: Callable) -> dict:
    try:
        return _TRACES.setdefault(fn, {})
    except TypeError:
        raise ScanError(f"scan: is_fn_pure=True keeps fn's traces keyed by fn, and a "
                        f"{type(fn).__name__} cannot be weakly referenced; wrap it in a function") from None


def scan_cached(fn: Callable, init: Any, xs: Any, cache: Optional[dict], tag: Hashable = None, *,
                rematerialize: bool = True) -> tuple[Any, Any]:
    """scan, reusing the traces in `cache` (a dict this function fills; None: trace
    anew) under keys that start with `tag`."""
    if not callable(fn):
        raise ScanError(f"scan: fn must be callable, got {type(fn).__name__}")
    init_leaves, init_spec = tree_flatten(init)
    xs_leaves, xs_spec = tree_flatten(xs)
    device = _check_leaves(init_leaves, xs_leaves)
    length = xs_leaves[0].shape[0]
    grad_mode = torch.is_grad_enabled()
    trace = None
    if cache is not None:
        key = (tag, device, grad_mode, rematerialize, init_spec, xs_spec,
               tuple((tuple(t.shape), t.dtype, t.requires_grad) for t in init_leaves),
               tuple((tuple(x.shape[1:]), x.dtype, x.requires_grad) for x in xs_leaves))
        trace = cache.get(key)
    if trace is None:
        trace = _trace(fn, init_spec, xs_spec, init_leaves, xs_leaves, grad_mode, eager_backward=cache is not None,
                       save_activations=grad_mode and not rematerialize)
        if cache is not None:
            cache[key] = trace
    body = trace.body
    closures = body.closures
    need_grad = grad_mode and (bool(closures) or any(t.requires_grad for t in init_leaves + xs_leaves))
    plan = _Plan(trace, length, device, init_leaves, xs_leaves, need_grad)
    if need_grad:
        outs = _ScanFunction.apply(plan, *init_leaves, *xs_leaves, *closures)
    else:
        outs = plan.run_forward(init_leaves, xs_leaves)[:plan.n_out]
    outs = list(outs)
    carry = tree_unflatten(outs[:len(init_leaves)], body.carry_spec)
    ys = body.unflatten_ys(outs[len(init_leaves):])
    return carry, ys


# first layer -> its one-layer function, kept for layers declared pure.
_ONE_LAYER: WeakKeyDictionary = WeakKeyDictionary()


def scan_layers(layers: Sequence[torch.nn.Module], *inputs: Any, is_layer_pure: bool = False,
                rematerialize: bool = True) -> Any:
    """Run `inputs` through every module of `layers` in turn, as one loop over their
    stacked parameters; the same as `for layer in layers: inputs = layer(*inputs)`.

    `is_layer_pure=True` promises that the layers' forward depends only on their
    tensors and the inputs' shapes (no Python state that changes between calls):
    the layer is then traced, forward and backward, at the first call only.
    `rematerialize` as for `scan`."""
    layers = list(layers)
    if is_layer_pure and layers:
        fn = _ONE_LAYER.get(layers[0]) or _ONE_LAYER.setdefault(layers[0], layer_function(layers[0]))
        return scan_layers_with(fn, layers, inputs, _trace_cache(fn), rematerialize=rematerialize)
    return scan_layers_with(layer_function(layers[0]) if layers else None, layers, inputs, None,
                            rematerialize=rematerialize)


def layer_function(template: torch.nn.Module) -> Callable:
    """`fn(carry, weights) -> (template run with weights on carry, None)`: one
    iteration of scan_layers. Holds `template` weakly (it may key a cache)."""
    ref = weakref.ref(template)

    def one_layer(carry, weights):
        args = carry if isinstance(carry, tuple) else (carry,)
        return torch.func.functional_call(ref(), weights, args, strict=True), None

    return one_layer


def scan_layers_with(fn: Optional[Callable], layers: list, inputs: Sequence, cache: Optional[dict],
                     tag: Hashable = None, *, rematerialize: bool = True) -> Any:
    """scan_layers with a given one-layer function (`layer_function(layers[0])`) and
    trace cache (see scan_cached)."""
    if not layers:
        return inputs[0] if len(inputs) == 1 else tuple(inputs)
    if not inputs:
        raise ScanError("scan_layers: give the first layer's input(s): scan_layers(layers, x)")
    names = _check_same_structure(layers)
    stacked = {name: _StackLayers.apply(*[_tensor(layer, name) for layer in layers]) for name in names}
    carry = tuple(inputs) if len(inputs) > 1 else inputs[0]
    final, _ = scan_cached(fn, carry, stacked, cache, tag, rematerialize=rematerialize)
    return final


class _StackLayers(torch.autograd.Function):
    """`torch.stack` of one tensor of every layer, with a backward that is a single
    `unbind` (torch's own stack backward dispatches two ops per layer)."""

    @staticmethod
    def forward(ctx, *tensors: torch.Tensor) -> torch.Tensor:
        return torch.stack(tensors)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return tuple(_unstack(grad))


def _unstack(stacked: LazyTensor) -> list[LazyTensor]:
    """`stacked.unbind(0)` as fresh tensors, read at offsets XLA cannot see as constants.

    Why: each layer's gradient feeds that layer's optimizer update. With static
    slices XLA fuses a different offset into every update kernel, so the kernels
    differ per layer and XLA:CPU compiles each anew: the first step grows with
    depth. Offsets that come out of an optimization barrier (one scalar each) are
    runtime values to XLA, so the update kernels of all layers are the same
    computation and each distinct one is compiled once."""
    n, shape, dtype = stacked.shape[0], tuple(stacked.shape[1:]), stacked.dtype
    offsets = call_node(_offsets_program(n), ())
    scalars = tuple(getitem_node(offsets, i) for i in range(n))
    barrier = Node(OPT_BARRIER, scalars, None, scalars, tuple(s.shape for s in scalars),
                   tuple(s.dtype for s in scalars), intern_sig((OPT_BARRIER, ((),) * n, (torch.int32,) * n)),
                   None, n)

    def fn(g, *offs):
        return tuple(lax.dynamic_index_in_dim(g, o, keepdims=False) for o in offs)

    program = Subprogram(fn, ("scan_layers_unstack", n, shape, dtype), f"unstack[{n}]", [(shape, dtype)] * n)
    spec = (shape, contiguous_strides(shape), dtype)
    operands = [stacked.checked_value()] + [getitem_node(barrier, i) for i in range(n)]
    return insert_call(program, operands, [spec] * n, stacked._st.device)


def _offsets_program(n: int) -> Subprogram:
    """() -> (0, 1, ..., n-1) as int32 scalars."""
    return Subprogram(lambda: tuple(jnp.int32(i) for i in range(n)), ("scan_layers_offsets", n),
                      f"offsets[{n}]", [((), torch.int32)] * n)


# -- checks --------------------------------------------------------------------------

def _check_leaves(init_leaves: list, xs_leaves: list) -> int:
    if not xs_leaves:
        raise ScanError("scan: xs has no tensors; the loop length is xs's leading dimension")
    require_lazy(ScanError, "scan", (("init", init_leaves), ("xs", xs_leaves)),
                 "Move tensors with t.to(lx.device()).")
    lengths = [x.shape[0] if x.dim() else None for x in xs_leaves]
    if None in lengths:
        raise ScanError("scan: every leaf of xs needs a leading dimension to iterate over; "
                        f"leaf {lengths.index(None)} is 0-d")
    if len(set(lengths)) > 1:
        raise ScanError(f"scan: the leaves of xs have different lengths along dim 0 ({lengths}); "
                        "they must all have the loop's length")
    if lengths[0] == 0:
        raise ScanError("scan: xs has length 0; there is no iteration to run")
    devices = {t._st.device for t in init_leaves + xs_leaves}
    if len(devices) > 1:
        raise ScanError(f"scan: init and xs are on several lazyxla devices {sorted(devices)}; use one")
    return devices.pop()


def _tensor(module: torch.nn.Module, name: str) -> torch.Tensor:
    return module.get_parameter(name) if name in dict(module.named_parameters()) else module.get_buffer(name)


def _check_same_structure(layers: list, who: str = "scan_layers") -> list[str]:
    """The names of the tensors to stack; an error naming the first difference
    (tensor names, then the module class, then shapes and dtypes)."""
    first = layers[0]
    ref = _signature(first)
    for i, layer in enumerate(layers[1:], start=1):
        sig = _signature(layer)
        kinds = f"layer {i} ({type(layer).__name__})", f"layer 0 ({type(first).__name__})"
        for name in list(ref) + [n for n in sig if n not in ref]:
            if name not in sig or name not in ref:
                has, lacks = kinds if name in sig else kinds[::-1]
                raise ScanError(f"{who}: mismatched keys: {has} has {name!r}, {lacks} has not; "
                                "every layer must have the same parameters and buffers")
        if type(layer) is not type(first):
            raise ScanError(f"{who}: layer {i} is a {type(layer).__name__}, layer 0 a "
                            f"{type(first).__name__}; every layer must have the same structure")
        for name in ref:
            (kind0, shape0, dtype0), (kind, shape, dtype) = ref[name], sig[name]
            if shape != shape0:
                raise ScanError(f"{who}: Shape mismatch of {name!r}: {list(shape0)} in layer 0, "
                                f"{list(shape)} in layer {i}; every layer must have the same shapes")
            if (kind, dtype) != (kind0, dtype0):
                raise ScanError(f"{who}: {name!r} is a {dtype0} {kind0} in layer 0 and a {dtype} "
                                f"{kind} in layer {i}; every layer must have the same dtypes and kinds")
    return list(ref)


def _signature(module: torch.nn.Module) -> dict:
    sig = {n: ("parameter", tuple(p.shape), p.dtype) for n, p in module.named_parameters()}
    sig.update({n: ("buffer", tuple(b.shape), b.dtype) for n, b in module.named_buffers()})
    return sig


# -- the traced iteration ----------------------------------------------------------------

class _Trace(NamedTuple):
    """fn traced: the flat iteration, its forward capture and (traced at the first
    call when cached, else at the first backward) its backward capture."""
    body: "_Body"
    forward: Capture
    backward: Optional[Capture]


def _trace(fn: Callable, init_spec, xs_spec, init_leaves: list, xs_leaves: list, grad_mode: bool,
           eager_backward: bool, save_activations: bool) -> _Trace:
    body = _Body(fn, init_spec, xs_spec, len(init_leaves), save_activations)
    examples = init_leaves + [x[0] for x in xs_leaves]
    # Saving: the forward's autograd graph must save what the backward's re-trace will
    # ask for, and the backward differentiates every floating leaf.
    requires = [_differentiable(t) for t in examples] if save_activations else None
    forward = _capture(body.traced, examples, "scan", requires_grad=requires)
    body.closures = _closure_leaves(body.results, body.placeholders, body.start_seq) if grad_mode else []
    backward = None
    need_grad = grad_mode and (bool(body.closures) or any(t.requires_grad for t in init_leaves + xs_leaves))
    if eager_backward and need_grad:
        n = body.n_carry
        backward = _capture_backward(body, body.placeholders[:n], body.placeholders[n:], body.results[n:],
                                     body.residuals)
    body.release()
    return _Trace(body, forward, backward)


def _capture_backward(body: "_Body", carry_examples: Sequence, x_examples: Sequence,
                      y_examples: Sequence, residual_examples: Sequence) -> Capture:
    """The backward iteration (_VjpBody) captured on placeholders shaped like the examples."""
    diff_c, diff_x = _diff_positions(carry_examples), _diff_positions(x_examples)
    grad_fn = _VjpBody(body, len(carry_examples), len(x_examples), diff_c, diff_x, body.closures)
    examples = (list(carry_examples) + list(x_examples) + [carry_examples[i] for i in diff_c] + list(y_examples)
                + list(residual_examples))
    requires = ([i in diff_c for i in range(len(carry_examples))]
                + [i in diff_x for i in range(len(x_examples))]
                + [False] * (len(diff_c) + len(y_examples) + len(residual_examples)))
    return _capture(grad_fn, examples, "scan_backward", requires_grad=requires)


def _diff_positions(examples: Sequence[torch.Tensor]) -> list[int]:
    return [i for i, t in enumerate(examples) if _differentiable(t)]


class _Body:
    """`fn` over flat leaves: (*carry, *x slice) -> (*new carry, *y). Records, on its
    traced call, the placeholders, results and the specs of the carry and y."""

    def __init__(self, fn: Callable, carry_spec, x_spec, n_carry: int, save_activations: bool = False) -> None:
        self.fn = fn
        self.save_activations = save_activations
        self.saved: list = []       # per tensor autograd saved, in order: ("input", i) | ("residual", j) | ("keep",)
        self.residuals: list = []   # the tensors computed inside fn that autograd saved
        self.carry_spec = carry_spec
        self.x_spec = x_spec
        self.n_carry = n_carry
        self.y_spec = None
        self.y_nones: list[bool] = []
        self.placeholders: list = []
        self.args: list = []            # what fn got for each placeholder (_writable)
        self.arg_versions: list[int] = []
        self.results: list = []
        self.start_seq = 0
        self.closures: list[torch.Tensor] = []   # leaves requiring grad that fn reads

    def __call__(self, *leaves: LazyTensor) -> list:
        args = self.args = [_writable(t) for t in leaves]
        self.arg_versions = [t._version for t in args]
        carry = tree_unflatten(args[:self.n_carry], self.carry_spec)
        x = tree_unflatten(args[self.n_carry:], self.x_spec)
        out = self.fn(carry, x)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ScanError(f"scan: fn must return (new_carry, y), got {type(out).__name__}")
        new_carry, y = out
        carry_leaves, carry_spec = tree_flatten(new_carry)
        if carry_spec != self.carry_spec:
            raise ScanError(f"scan: fn's new carry has structure {carry_spec}, the carry {self.carry_spec}; "
                            "it must keep the carry's structure")
        for i, (new, old) in enumerate(zip(carry_leaves, leaves)):
            if not isinstance(new, torch.Tensor) or new.shape != old.shape or new.dtype != old.dtype:
                got = f"{new.dtype} {list(new.shape)}" if isinstance(new, torch.Tensor) else type(new).__name__
                raise ScanError(f"scan: carry leaf {i} goes in as {old.dtype} {list(old.shape)} and comes back "
                                f"from fn as {got}; a carry must keep its shape and dtype")
        y_leaves, self.y_spec = tree_flatten(y)
        for i, t in enumerate(y_leaves):
            if not isinstance(t, torch.Tensor) and t is not None:
                raise ScanError(f"scan: leaf {i} of fn's y is a {type(t).__name__}; y must hold tensors "
                                "(or None)")
        self.y_nones = [t is None for t in y_leaves]
        return carry_leaves + [t for t in y_leaves if t is not None]

    def unflatten_ys(self, ys: list) -> Any:
        it = iter(ys)
        return tree_unflatten([None if none else next(it) for none in self.y_nones], self.y_spec)

    def traced(self, *leaves: LazyTensor) -> list:
        """The call `capture` makes: also records what the closure walk needs and,
        when saving activations, returns the residuals after the results."""
        self.placeholders = list(leaves)
        self.start_seq = _next_sequence_nr()
        if not self.save_activations:
            self.results = self(*leaves)
            return self.results
        with torch.autograd.graph.saved_tensors_hooks(self._record, _never_unpacked):
            self.results = self(*leaves)
        return self.results + self.residuals

    def reads_carries(self) -> bool:
        """Whether the backward iteration reads the iteration's carry: always when it
        re-runs fn, else only if autograd saved a carry input itself."""
        return not self.save_activations or any(k[0] == "input" and k[1] < self.n_carry for k in self.saved)

    def release(self) -> None:
        """Keep only the shapes of the traced tensors. The trace outlives the call (a
        cache, or the autograd node of the step); its tensors' autograd graph would
        keep values made inside fn without inputs (a mask) alive and pending, and
        every sync would compute them as extra outputs."""
        self.placeholders, self.args = [], []
        self.results = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in self.results]
        self.residuals = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in self.residuals]

    def _record(self, t: torch.Tensor) -> tuple:
        """saved_tensors_hooks pack of the forward trace: sort each saved tensor.
        An iteration input is read again in the backward; a tensor computed from
        the inputs is a residual (stacked by the forward loop): one with a grad_fn, or
        an output autograd does not differentiate, such as a layer norm's mean and
        rstd (left to the re-trace, they would make it re-run all the iteration before
        them). The rest (outer leaves, constants such as masks) the backward's re-trace
        makes or reads itself. The trace's graph is never run backward, so it keeps
        only this token: a tensor kept here that its own node saved (an op's output)
        would make a reference cycle through autograd that Python's gc cannot free."""
        kind: tuple = ("keep",)
        for i, (ph, arg, version) in enumerate(zip(self.placeholders, self.args, self.arg_versions)):
            if t is ph or (t is arg and t._version == version):   # fn's argument, not yet written
                kind = ("input", i)
        if kind == ("keep",) and (t.grad_fn is not None or self._computed_from_inputs(t)):
            j = next((j for j, r in enumerate(self.residuals) if r is t), len(self.residuals))
            if j == len(self.residuals):
                self.residuals.append(t)
            kind = ("residual", j)
        self.saved.append(kind)
        return kind

    def _computed_from_inputs(self, t: torch.Tensor) -> bool:
        """Whether t's pending IR reads one of the iteration's placeholders."""
        if not isinstance(t, LazyTensor):
            return False
        own = {id(ph.lazy_value().data) for ph in self.placeholders}
        return not own.isdisjoint(data_reachable([t.lazy_value()]))


def _writable(placeholder: LazyTensor) -> LazyTensor:
    """What fn gets for a placeholder: a placeholder that requires grad is an autograd
    leaf, and torch refuses in-place ops on those ("a leaf Variable that requires grad
    is being used in an in-place operation"), yet `carry += x` is how the Python loop
    often reads. fn gets a clone instead (a copy XLA elides); gradients flow through
    it to the leaf, and fn's writes stay inside the iteration (scan never writes into
    init or xs). Without grad the placeholder itself is writable: capture turns the
    write into the iteration's value. _Body._record counts a clone autograd saves
    before any write as the input it copies."""
    if placeholder.requires_grad and torch.is_grad_enabled():
        return placeholder.clone()
    return placeholder


def _capture(fn: Callable, examples: list, name: str, requires_grad=None) -> Capture:
    try:
        return capture(fn, examples, name=name, requires_grad=requires_grad)
    except CaptureError as e:
        raise type(e)(f"{name}: {e} (scan traces fn once, on placeholders, so its body must be pure "
                      "tensor code: no host reads, no writes to outside tensors)") from e


def _next_sequence_nr() -> int:
    """Autograd nodes made from now on have sequence numbers from this one on."""
    with torch.enable_grad():
        return torch.zeros((), requires_grad=True).neg().grad_fn._sequence_nr() + 1


def _closure_leaves(results: list, placeholders: list, start_seq: int) -> list[torch.Tensor]:
    """Leaf tensors requiring grad that the traced iteration read from outside: the
    AccumulateGrad nodes its autograd graph reaches, less the placeholders'."""
    own = {id(p) for p in placeholders}
    leaves: dict = {}
    seen: set = set()
    stack = [r.grad_fn for r in results if isinstance(r, torch.Tensor) and r.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None:   # AccumulateGrad: a leaf
            if id(variable) not in own:
                leaves.setdefault(id(variable), variable)
            continue
        if node._sequence_nr() < start_seq:
            raise ScanError("scan: fn reads a tensor from outside that requires grad and was computed "
                            "(it is not a leaf such as a parameter); pass it in init or xs, or detach it")
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    for t in leaves.values():
        if not isinstance(t, LazyTensor):
            raise ScanError(f"scan: fn closes over a {t.device} tensor that requires grad; "
                            "move it to the lazyxla device")
    return list(leaves.values())


def _differentiable(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


# -- the loops ---------------------------------------------------------------------------

class _Plan:
    """One scan call: the captured iteration and how to run it forward and backward."""

    def __init__(self, trace: _Trace, length: int, device: int, init: list, xs: list, need_grad: bool) -> None:
        self.trace, self.length, self.device = trace, length, device
        self.body, self.forward = trace.body, trace.forward
        self.n_carry, self.n_xs = len(init), len(xs)
        self.n_out = len(trace.body.results)
        self.n_res = len(trace.body.residuals)
        self.save_carries = need_grad and trace.body.reads_carries()
        self.seeds: list = []

    def run_forward(self, init: list, xs: list) -> list[LazyTensor]:
        """Insert the forward loop: (*final carry, *ys, *residuals, [*carries at each
        iteration's start]), the last two stacked per iteration."""
        operands = self.forward.operands(list(init) + [x for x in xs])
        n_seeds = self.forward.n_seeds
        self.seeds = operands[len(operands) - n_seeds:] if n_seeds else []
        program = _forward_loop(self.forward, self.length, self.n_carry, self.n_xs, self.n_res, self.save_carries)
        specs = [(shape, contiguous_strides(shape), dtype) for shape, dtype in program.out_avals]
        return insert_call(program, operands, specs, self.device)

    def run_backward(self, carries: list, xs: list, g_carry: list, g_ys: list, residuals: list) -> list:
        """Insert the backward loop; the gradients of (*init, *xs, *closures), None where
        a leaf is not differentiable. `carries` is empty when the forward saved none."""
        carry_examples = [c[0] for c in carries] if self.save_carries else list(g_carry)
        x_examples = [x[0] for x in xs]
        diff_c, diff_x = _diff_positions(carry_examples), _diff_positions(x_examples)
        backward = self.trace.backward or _capture_backward(self.body, carry_examples, x_examples,
                                                            [y[0] for y in g_ys], [r[0] for r in residuals])
        # Saving activations, random values are residuals (a dropout mask) and the
        # backward draws none; re-running fn, it replays every seed of the forward.
        if backward.n_seeds not in (0, len(self.seeds)):
            raise CaptureError(f"scan: the backward re-run of fn draws {backward.n_seeds} random seeds where "
                               f"the forward drew {len(self.seeds)}; not supported yet")
        inputs = list(carries) + list(xs) + [g_carry[i] for i in diff_c] + list(g_ys) + list(residuals)
        operands = [t.checked_value() for t in inputs]
        outer = backward.extra_operands()
        operands += outer[:len(outer) - backward.n_seeds] + (list(self.seeds) if backward.n_seeds else [])
        unsaved = None if self.save_carries else [(tuple(c.shape), c.dtype) for c in carry_examples]
        program = _backward_loop(backward, self.length, self.n_carry, len(xs), len(diff_c), len(diff_x),
                                 len(g_ys), len(residuals), unsaved)
        specs = [(shape, contiguous_strides(shape), dtype) for shape, dtype in program.out_avals]
        outs = insert_call(program, operands, specs, self.device)
        g_init = [None] * self.n_carry
        g_xs = [None] * len(xs)
        for i, g in zip(diff_c, outs[:len(diff_c)]):
            g_init[i] = g
        for i, g in zip(diff_x, outs[len(diff_c):len(diff_c) + len(diff_x)]):
            g_xs[i] = g
        return g_init + g_xs + list(outs[len(diff_c) + len(diff_x):])


class _VjpBody:
    """The backward iteration: (*carry in, *x slice, *d carry out, *d y, *residuals) ->
    (*d carry in, *d x slice, *d closures), by re-tracing fn and torch.autograd.grad.

    With saved activations the re-trace hands autograd the forward's residuals in
    place of what it saves, so the gradients read only those and the re-traced
    forward is dead code the capture drops; otherwise it is the re-run."""

    def __init__(self, body: _Body, n_carry: int, n_xs: int, diff_c: list, diff_x: list,
                 closures: list) -> None:
        self.body, self.n_carry, self.n_xs = body, n_carry, n_xs
        self.diff_c, self.diff_x, self.closures = diff_c, diff_x, closures

    def __call__(self, *phs: LazyTensor) -> list:
        carry_in = phs[:self.n_carry]
        x = phs[self.n_carry:self.n_carry + self.n_xs]
        n_res = len(self.body.residuals)
        cotangents = phs[self.n_carry + self.n_xs:len(phs) - n_res]
        residuals = phs[len(phs) - n_res:]
        if self.body.save_activations:
            replay = _Replay(self.body.saved, list(carry_in) + list(x), residuals)
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(replay.pack, replay.unpack):
                outs = self.body(*carry_in, *x)
            replay.check_done()
        else:
            with torch.enable_grad():
                outs = self.body(*carry_in, *x)
        outputs = [outs[i] for i in self.diff_c] + outs[self.n_carry:]
        pairs = [(o, g) for o, g in zip(outputs, cotangents) if o.requires_grad]
        wrt = [carry_in[i] for i in self.diff_c] + [x[i] for i in self.diff_x] + list(self.closures)
        grads = [None] * len(wrt)
        if pairs and wrt:
            grads = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
        return [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]


def _never_unpacked(kind: tuple):
    raise AssertionError("lazyxla: scan's forward trace is never differentiated")


class _Replay:
    """saved_tensors_hooks of the backward's re-trace: the k-th tensor autograd saves
    is the k-th of the forward trace (same fn, same shapes), replaced by what the
    forward recorded for it (_Body._record)."""

    def __init__(self, saved: list, inputs: list, residuals: Sequence) -> None:
        self.saved, self.inputs, self.residuals = saved, inputs, residuals
        self.count = 0

    def pack(self, t: torch.Tensor):
        if self.count >= len(self.saved):
            raise ScanError(self._mismatch())
        kind = self.saved[self.count]
        self.count += 1
        if kind[0] == "input":
            return self.inputs[kind[1]]
        if kind[0] == "residual":
            return self.residuals[kind[1]]
        return t

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def check_done(self) -> None:
        if self.count != len(self.saved):
            raise ScanError(self._mismatch())

    def _mismatch(self) -> str:
        return (f"scan: fn's re-trace for the backward saved other tensors for autograd than its forward trace "
                f"({len(self.saved)}); fn must trace the same ops each time. scan(..., rematerialize=True) "
                "re-runs fn instead of saving its activations")


def _forward_loop(body: Capture, length: int, n_carry: int, n_xs: int, n_res: int,
                  save_carries: bool) -> Subprogram:
    body_fn = body.program.fn
    n_seeds = body.n_seeds
    avals = body.program.out_avals
    carry_avals, y_avals = avals[:n_carry], avals[n_carry:]   # y_avals: the ys, then the residuals
    out_avals = (list(carry_avals) + [((length, *s), d) for s, d in y_avals]
                 + ([((length, *s), d) for s, d in carry_avals] if save_carries else []))

    def fn(*operands):
        carry0 = tuple(operands[:n_carry])
        xs = tuple(operands[n_carry:n_carry + n_xs])
        rest = operands[n_carry + n_xs:]
        outer, seeds = rest[:len(rest) - n_seeds], rest[len(rest) - n_seeds:]

        def step(carry, inp):
            x, i = inp
            index = i.astype(jnp.int64) * _SEED_MIX
            outs = body_fn(*carry, *x, *outer, *(s ^ index for s in seeds))
            saved = carry if save_carries else ()
            return tuple(outs[:n_carry]), (tuple(outs[n_carry:]), saved)

        final, (ys, carries) = lax.scan(step, carry0, (xs, jnp.arange(length)))
        return (*final, *ys, *carries)

    return Subprogram(fn, ("scan", body.program.key, length, n_carry, n_xs, n_res, save_carries),
                      f"scan[{length}]", out_avals)


def _backward_loop(body: Capture, length: int, n_carry: int, n_xs: int, n_dc: int, n_dx: int,
                   n_dy: int, n_res: int, unsaved_carries: Optional[list] = None) -> Subprogram:
    """(*carries [N,...], *xs, *d final carry, *d ys, *residuals [N,...], *outer, *seeds) ->
    (*d init, *d xs stacked, *d closures summed), the body run from the last iteration.
    `unsaved_carries`: the (shape, dtype) of each carry when the forward saved none
    (the backward iteration reads no carry: it gets zeros, dead code to XLA)."""
    body_fn = body.program.fn
    n_seeds = body.n_seeds
    avals = body.program.out_avals     # d carry in, d x slices, d closures
    dc_avals, dx_avals, dcl_avals = avals[:n_dc], avals[n_dc:n_dc + n_dx], avals[n_dc + n_dx:]
    out_avals = list(dc_avals) + [((length, *s), d) for s, d in dx_avals] + list(dcl_avals)

    if unsaved_carries is not None:
        n_saved = 0
        zero_carries = lambda: tuple(jnp.zeros(s, jax_dtype(d)) for s, d in unsaved_carries)  # noqa: E731
    else:
        n_saved = n_carry

    def fn(*operands):
        ends = list(itertools.accumulate((n_saved, n_xs, n_dc, n_dy, n_res)))
        carries, xs, g_final, g_ys, residuals = (tuple(operands[start:end])
                                                 for start, end in zip([0] + ends, ends))
        rest = operands[ends[-1]:]
        outer, seeds = rest[:len(rest) - n_seeds], rest[len(rest) - n_seeds:]

        def step(state, inp):
            g_carry, g_closures = state
            carry_in, x, g_y, res, i = inp
            if not n_saved:
                carry_in = zero_carries()
            index = i.astype(jnp.int64) * _SEED_MIX
            outs = body_fn(*carry_in, *x, *g_carry, *g_y, *res, *outer, *(s ^ index for s in seeds))
            summed = tuple(a + b for a, b in zip(g_closures, outs[n_dc + n_dx:]))
            return (tuple(outs[:n_dc]), summed), tuple(outs[n_dc:n_dc + n_dx])

        zeros = tuple(jnp.zeros(s, jax_dtype(d)) for s, d in dcl_avals)
        (g_init, g_closures), g_xs = lax.scan(step, (g_final, zeros),
                                              (carries, xs, g_ys, residuals, jnp.arange(length)),
                                              reverse=True)
        return (*g_init, *g_xs, *g_closures)

    key = ("scan_backward", body.program.key, length, n_carry, n_xs, n_dc, n_dx, n_dy, n_res,
           None if unsaved_carries is None else tuple(unsaved_carries))
    return Subprogram(fn, key,
                      f"scan_backward[{length}]", out_avals)


class _ScanFunction(torch.autograd.Function):
    """The loop as one autograd node: inputs (*init, *xs, *closures), outputs
    (*final carry, *ys); backward is the reverse loop (module docstring)."""

    @staticmethod
    def forward(ctx, plan: _Plan, *tensors: LazyTensor):
        init = tensors[:plan.n_carry]
        xs = tensors[plan.n_carry:plan.n_carry + plan.n_xs]
        outs = plan.run_forward(init, xs)
        residuals = outs[plan.n_out:plan.n_out + plan.n_res]
        carries = outs[plan.n_out + plan.n_res:]
        ctx.plan = plan
        ctx.save_for_backward(*carries, *xs, *residuals)   # carries: none if the backward reads none
        results = outs[:plan.n_out]
        ctx.mark_non_differentiable(*[r for r in results if not _differentiable(r)])
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        plan: _Plan = ctx.plan
        saved = ctx.saved_tensors
        n_carry, n_xs = plan.n_carry, plan.n_xs
        n_saved = n_carry if plan.save_carries else 0
        carries, xs, residuals = saved[:n_saved], saved[n_saved:n_saved + n_xs], saved[n_saved + n_xs:]
        carry_avals = plan.forward.program.out_avals[:n_carry]
        g_carry = [_zeros_if_none(g, shape, dtype, plan.device) for g, (shape, dtype) in zip(grads, carry_avals)]
        ys = grads[n_carry:]
        y_avals = plan.forward.program.out_avals[n_carry:plan.n_out]
        g_ys = [_zeros_if_none(g, (plan.length, *shape), dtype, plan.device)
                for g, (shape, dtype) in zip(ys, y_avals)]
        with torch.no_grad():
            return (None, *plan.run_backward(list(carries), list(xs), g_carry, g_ys, list(residuals)))


def _zeros_if_none(g, shape, dtype, device):
    """A zero cotangent for an output the loss does not depend on."""
    if g is not None:
        return g
    return torch.zeros(shape, dtype=dtype, device=torch.device("lazyxla", device))
