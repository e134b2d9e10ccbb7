"""scan's body tracing: `fn(carry, x)` over flat leaves, traced once on placeholders
into the forward iteration, the closed-over leaves that need gradients, and the
backward iteration (a re-trace of `fn` under torch's autograd). docs/design.md,
"scan", says how the backward reads saved activations or re-runs `fn`."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..frontend.tensor import LazyTensor
from ..ir.graph import data_reachable
from ..capture import Capture
from ._loop import capture_body, check_carry


class ScanError(ValueError):
    """Bad input to scan / scan_layers (the message names the problem and the fix)."""


class Trace(NamedTuple):
    """fn traced: the flat iteration, its forward capture and (traced at the first
    call when cached, else at the first backward) its backward capture."""
    body: "Body"
    forward: Capture
    backward: Optional[Capture]


def trace(fn: Callable, init_spec, xs_spec, init_leaves: list, xs_leaves: list, grad_mode: bool,
          eager_backward: bool, save_activations: bool) -> Trace:
    """Trace `fn` once on placeholders like `init` and one slice of `xs`; its backward
    too when `eager_backward` (a cached trace) and autograd will need it."""
    body = Body(fn, init_spec, xs_spec, len(init_leaves), save_activations)
    examples = init_leaves + [x[0] for x in xs_leaves]
    # Saving: the forward's autograd graph must save what the backward's re-trace will
    # ask for, and the backward differentiates every floating leaf.
    requires = [differentiable(t) for t in examples] if save_activations else None
    forward = _capture(body.traced, examples, "scan", requires_grad=requires)
    body.closures = _closure_leaves(body.results, body.placeholders, body.start_seq) if grad_mode else []
    backward = None
    need_grad = grad_mode and (bool(body.closures) or any(t.requires_grad for t in init_leaves + xs_leaves))
    if eager_backward and need_grad:
        n = body.n_carry
        backward = capture_backward(body, body.placeholders[:n], body.placeholders[n:], body.results[n:],
                                    body.residuals)
    body.release()
    return Trace(body, forward, backward)


def capture_backward(body: "Body", carry_examples: Sequence, x_examples: Sequence,
                     y_examples: Sequence, residual_examples: Sequence) -> Capture:
    """The backward iteration (_VjpBody) captured on placeholders shaped like the examples."""
    diff_c, diff_x = diff_positions(carry_examples), diff_positions(x_examples)
    grad_fn = _VjpBody(body, len(carry_examples), len(x_examples), diff_c, diff_x, body.closures)
    examples = (list(carry_examples) + list(x_examples) + [carry_examples[i] for i in diff_c] + list(y_examples)
                + list(residual_examples))
    requires = ([i in diff_c for i in range(len(carry_examples))]
                + [i in diff_x for i in range(len(x_examples))]
                + [False] * (len(diff_c) + len(y_examples) + len(residual_examples)))
    return _capture(grad_fn, examples, "scan_backward", requires_grad=requires)


def diff_positions(examples: Sequence[torch.Tensor]) -> list[int]:
    return [i for i, t in enumerate(examples) if differentiable(t)]


class Body:
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
        check_carry(ScanError, "scan", "fn", "carry leaf {}", carry_leaves, leaves)
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
    write into the iteration's value. Body._record counts a clone autograd saves
    before any write as the input it copies."""
    if placeholder.requires_grad and torch.is_grad_enabled():
        return placeholder.clone()
    return placeholder


def _capture(fn: Callable, examples: list, name: str, requires_grad: Optional[list] = None) -> Capture:
    return capture_body(fn, examples, name, "scan traces fn once, on placeholders, so its body must be pure "
                        "tensor code: no host reads, no writes to outside tensors", requires_grad)


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


def differentiable(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


class _VjpBody:
    """The backward iteration: (*carry in, *x slice, *d carry out, *d y, *residuals) ->
    (*d carry in, *d x slice, *d closures), by re-tracing fn and torch.autograd.grad.

    With saved activations the re-trace hands autograd the forward's residuals in
    place of what it saves, so the gradients read only those and the re-traced
    forward is dead code the capture drops; otherwise it is the re-run."""

    def __init__(self, body: Body, n_carry: int, n_xs: int, diff_c: list, diff_x: list,
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
    forward recorded for it (Body._record)."""

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


