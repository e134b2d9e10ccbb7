"""Capture a function over lazy tensors once; replay it as one CALL node per call.

`capture(fn, inputs)` runs `fn` once on placeholder lazy tensors shaped like `inputs`
(ordinary tracing) and turns the IR it produced into a pure JAX function
(`compile/program.build`) in a `Subprogram`. `Capture.__call__(inputs)` then inserts one
`call_node` into the pending graph, dispatching no ATen op; it fuses into the step graph
at the next sync, with donation as for any traced op. Inside `fn`: writes into inputs are
reported (`Capture.mutated`) and returned as extra outputs; tensors created inside are
baked in as read-only device data; device data of earlier tensors is an operand re-read
at every call; earlier tensors' pending computation raises `CaptureError`; writes into
earlier tensors are refused and undone; lifted Python scalars are baked as constants,
random seeds stay operands drawn per call; host reads of values computed from the inputs
are refused.

Placeholders and the errors are in sync/placeholders.py, which the sync layer reads.

Design: docs/design.md, "capture/function.py".
"""
from __future__ import annotations

import itertools
import weakref
from typing import Callable, Optional, Sequence

import jax.numpy as jnp
import numpy as np
import torch

from ..compile.program import build
from ..ir.scalars import scalar_args, scalar_slots
from ..frontend.device import DEVICES
from ..frontend.handlers import draw_seed
from ..frontend.storage import Storage, live_devices, live_storages
from ..frontend.tensor import LazyTensor
from ..frontend.tracing import contiguous_strides
from ..ir.build import call_outputs, data_node, scalar_node
from ..ir.call import Subprogram
from ..ir.node import DATA, SCALAR, Node
from ..state import STATE
from ..sync import step_capture
from ..sync.collect import collect
from ..sync.placeholders import CaptureError, InputMutationError, Placeholder


_serial = itertools.count()


class Capture:
    """A captured function: `program` plus how to feed it and read its results."""

    def __init__(self, program: Subprogram, device: int, n_inputs: int, operand_plan: list,
                 out_specs: list, n_results: int, mutated: list[int]) -> None:
        self.program = program
        self.device = device
        self.n_inputs = n_inputs
        self.operand_plan = operand_plan  # per extra operand: ("storage", weakref) | ("seed", None)
        self.out_specs = out_specs        # (shape, stride, dtype) per program output
        self.n_results = n_results        # outputs of fn; then one per mutated input
        self.mutated = mutated            # input positions fn wrote into, in output order
        self.donor_directives: list[tuple[int, bool]] = []   # (input position, flag) fn set

    def __call__(self, inputs: Sequence[LazyTensor]) -> list[LazyTensor]:
        """Insert one call into the pending graph: fn's results, then the new values of
        the mutated inputs (in `self.mutated` order), as fresh lazy tensors."""
        return insert_call(self.program, self.operands(inputs), self.out_specs, self.device)

    def insert(self, values: Sequence[Node]) -> tuple[list[LazyTensor], list[Node]]:
        """Insert one call on `values`, the inputs' current values (`checked_value()` each,
        which the caller read in its own pass over the inputs): (fn's results as fresh lazy
        tensors, the new values of the mutated inputs as bare nodes). A caller that writes
        the new values back into its inputs needs no tensor for them: a compiled AdamW step
        updates 212 tensors per call, and a tensor (wrapper subclass + storage) costs more
        than its node."""
        if len(values) != self.n_inputs:
            raise CaptureError(f"lazyxla: captured program {self.program.name} takes {self.n_inputs} "
                               f"tensors, got {len(values)}")
        outs = insert_call(self.program, list(values) + self.extra_operands(), self.out_specs, self.device,
                           self.n_results)
        return outs[:self.n_results], outs[self.n_results:]

    def operands(self, inputs: Sequence[LazyTensor]) -> list[Node]:
        """A call's operands: the inputs' values, then `extra_operands()`. The inputs
        may be larger along the leading dimension than at capture (gradient
        accumulation passes whole iterables to a loop around the captured body)."""
        if len(inputs) != self.n_inputs:
            raise CaptureError(f"lazyxla: captured program {self.program.name} takes {self.n_inputs} "
                               f"tensors, got {len(inputs)}")
        return [t.checked_value() for t in inputs] + self.extra_operands()

    def extra_operands(self) -> list[Node]:
        """The operands after the inputs: the current values of the outer tensors the
        function reads, then a fresh seed per random op."""
        operands = []
        for kind, ref in self.operand_plan:
            if kind == "seed":
                operands.append(scalar_node(draw_seed()))
                continue
            st = ref()
            if st is None:
                raise CaptureError(
                    f"lazyxla: captured program {self.program.name} reads a tensor from outside its "
                    "inputs that no longer exists; capture again, or pass that tensor as an input")
            operands.append(st.value)
        return operands

    @property
    def n_seeds(self) -> int:
        return sum(kind == "seed" for kind, _ in self.operand_plan)


def insert_call(program: Subprogram, operands: Sequence[Node], out_specs: Sequence[tuple],
                device: int, n_tensors: Optional[int] = None) -> list:
    """One CALL node of `program` in the pending graph; its first `n_tensors` outputs
    (default: all) as new lazy tensors with `out_specs` ((shape, stride, dtype) each),
    the rest as their bare nodes."""
    items = call_outputs(program, operands)
    if items:
        step_capture.note_call(device, items)
    if n_tensors is None:
        n_tensors = len(items)
    wrap = LazyTensor.wrap
    return [wrap(Storage(item, device), None, item, (shape, stride, 0, dtype))
            for item, (shape, stride, dtype) in zip(items[:n_tensors], out_specs)] + items[n_tensors:]


def capture(fn: Callable[..., Sequence[LazyTensor]], inputs: Sequence[LazyTensor], *,
            name: str, requires_grad: Optional[Sequence[bool]] = None) -> Capture:
    """Run `fn(*placeholders)` once and capture it (module docstring).

    `fn` returns a sequence of lazy tensors (its results). `requires_grad`
    (default: as the inputs) sets it on the placeholders, so autograd can run
    inside `fn`.
    """
    if not inputs:
        raise CaptureError("lazyxla: a captured function needs at least one lazy tensor input")
    device = inputs[0]._st.device
    if requires_grad is None:
        requires_grad = [t.requires_grad for t in inputs]
    holders = [Placeholder(None, tuple(t.shape), t.dtype, device) for t in inputs]
    placeholders = []
    for data, t, grad in zip(holders, inputs, requires_grad):
        node = data_node(data)
        ph = LazyTensor.wrap(Storage(node, device), None, node,
                             (data.shape, contiguous_strides(data.shape), 0, data.dtype))
        placeholders.append(ph.requires_grad_(bool(grad)))
    own = {id(ph._st) for ph in placeholders}
    before = {id(st): (st, st.value) for d in live_devices() for st in live_storages(d)
              if id(st) not in own}
    budget = STATE.traced_since_sync
    STATE.captures += 1
    try:
        results = list(fn(*placeholders))
    finally:
        STATE.captures -= 1
        STATE.traced_since_sync = budget   # the capture is one program: the size cap does not cut it
        written = _undo_outer_writes(before)
    try:
        return _build_capture(name, device, placeholders, holders, results, before, written)
    finally:
        for data in holders:
            # Tensors computed inside fn that escape it (a global list) read these
            # placeholders: make any later use fail clearly instead of at execution.
            data.donated_in = f"<capture of {name}> (a value computed inside a captured function)"


def _build_capture(name: str, device: int, placeholders: list, holders: list, results: list,
                   before: dict, written: int) -> Capture:
    if written:
        raise InputMutationError(
            f"lazyxla: the function captured as {name} wrote into {written} tensor(s) that are "
            "neither its inputs nor created inside it (undone); pass them as inputs instead")
    for r in results:
        if not isinstance(r, LazyTensor) or r._st.device != device:
            raise CaptureError(f"lazyxla: the function captured as {name} must return lazy tensors "
                               f"on lazyxla:{device}, got {r!r:.80}")
    mutated = [i for i, ph in enumerate(placeholders) if ph._st.value.op is not DATA
               or ph._st.value.data is not holders[i]]
    roots = [r.lazy_value() for r in results] + [placeholders[i]._st.value for i in mutated]
    graph, _ = collect(device, [(root, None) for root in roots])
    outer_pending = {id(v) for _, v in before.values() if v.op is not DATA}
    for n in graph.order:
        if id(n) in outer_pending:
            raise CaptureError(
                f"lazyxla: the function captured as {name} reads a tensor with pending computation "
                "that is not one of its inputs; pass that tensor as an input, or lx.sync() before "
                "the first call")
    position = {id(d): i for i, d in enumerate(holders)}
    # Inputs of an enclosing capture (a loop inside a scan body) have no owner: find
    # their storages, so they become operands like any outer tensor.
    enclosing = {id(v.data): st for st, v in before.values() if v.op is DATA and isinstance(v.data, Placeholder)}
    operand_plan, baked = [], []
    for data in graph.params:
        if id(data) in position:
            continue
        owner = data.owner_storage() or enclosing.get(id(data))
        if (owner is not None and owner.seq < placeholders[0]._st.seq
                and owner.value.op is DATA and owner.value.data is data):
            operand_plan.append(("storage", weakref.ref(owner)))
        else:
            data.read_only = True   # a constant of the program: never donated
            baked.append(data)
    params = _param_order(graph, position, operand_plan, baked)
    seeds = _seed_positions(graph)
    operand_plan += [("seed", None)] * len(seeds)
    positions = _distinct_positions(roots)
    program_fn = _program(graph, params, seeds, positions)
    out_specs = [(tuple(n.shape), _stride_of(r) if k < len(results) else contiguous_strides(n.shape), n.dtype)
                 for k, (n, r) in enumerate(zip(roots, results + [None] * len(mutated)))]
    constants = tuple(None if i in seeds else s.data for i, s in enumerate(graph.scalars))
    key = (name, graph.key, tuple(params), constants, tuple(positions))
    program = Subprogram(program_fn, (name, next(_serial)) if baked else key, name,
                         [(shape, dtype) for shape, _, dtype in out_specs])
    cap = Capture(program, device, len(placeholders), operand_plan, out_specs, len(results), mutated)
    cap.donor_directives = [(i, d.directive) for i, d in enumerate(holders) if d.directive is not None]
    return cap


def _undo_outer_writes(before: dict) -> int:
    written = 0
    for st, old in before.values():
        if st.value is not old:
            st.value = old
            st.version += 1
            STATE.pending_work = True
            written += 1
    return written


def _param_order(graph, position: dict, operand_plan: list, baked: list) -> list:
    """How each of the graph's parameters is fed: ("in", k) the k-th operand of the call,
    or ("const", data) a baked buffer. Operands: inputs, then outer storages, then seeds."""
    n_inputs = len(position)
    outer = iter(range(n_inputs, n_inputs + len(operand_plan)))
    baked_ids = {id(d) for d in baked}
    order = []
    for data in graph.params:
        if id(data) in position:
            order.append(("in", position[id(data)]))
        elif id(data) in baked_ids:
            order.append(("const", id(data)))
        else:
            order.append(("in", next(outer)))
    return order


def _seed_positions(graph) -> list[int]:
    """Indices into graph.scalars of random seeds (runtime operands, fresh each call)."""
    seed_ids = {id(n.kwargs["seed"]) for n in graph.order
                if n.kwargs and isinstance(n.kwargs.get("seed"), Node)}
    return [i for i, s in enumerate(graph.scalars) if s.op is SCALAR and id(s) in seed_ids]


def _distinct_positions(roots: list) -> list[int]:
    """Per root, the index of its node among the distinct roots in first-seen order
    (collect's numbering): a function may return one value twice (`x` and
    `x.detach()`, or an input), and each result still gets an output of its own."""
    first: dict = {}
    return [first.setdefault(id(r), len(first)) for r in roots]


def _program(graph, params: list, seeds: list[int], positions: list[int]) -> Callable:
    """fn(*call operands) -> outputs: the graph's program with inputs and outer tensors
    as operands, baked buffers and constant scalars closed over, seeds as operands."""
    program, _ = build(graph)
    root_slots = [graph.root_slots[p] for p in positions]
    constants = {id(d): d.array for d in graph.params}
    values = [np.asarray(v) for v in scalar_args(graph)]   # constants: numpy, so .astype works
    # where each seed sits among the scalar operands: its own operand, or an element of its
    # kind's pack (the backend packs scalars, or a long chain does: ir/scalars.py)
    slots = scalar_slots(graph, 0)
    seed_slots = [slots[id(graph.scalars[i])] for i in seeds]

    def fn(*operands):
        args = [operands[k] if kind == "in" else constants[k] for kind, k in params]
        scalars = list(values)
        seed_operands = operands[len(operands) - len(seeds):] if seeds else ()
        for (k, element), s in zip(seed_slots, seed_operands):
            scalars[k] = s if element is None else jnp.asarray(scalars[k]).at[element].set(s)
        outs = program(*args, *scalars)
        return tuple(outs[slot] for slot in root_slots)   # collect's canonical order -> fn's order

    return fn


def _stride_of(t: LazyTensor) -> tuple:
    """Strides of a result: its own for a base tensor, contiguous for a view."""
    return t._mkey[1] if t._view is None else contiguous_strides(tuple(t.shape))
