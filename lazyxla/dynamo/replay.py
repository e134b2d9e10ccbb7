"""One ATen graph from AOTAutograd, captured once per input signature, replayed as
one CALL node per call (capture/function.py).

`CompiledGraph` is what the backend returns for each functionalized ATen graph (forward,
backward or inference). Called with the real inputs, it checks them (lazy tensors on one
device; a 0-d CPU tensor is uploaded as lazy mode lifts it) and keys them by shape and
dtype; on a new signature it runs the graph once over placeholders into a pure JAX
program; then it applies the donation directives set on its inputs
(`torch.ops.lazyxla.set_buffer_donor_`), inserts the CALL node and writes the new values
of inputs updated in place back into them. Nothing is executed here: the call joins the
pending graph and fuses with the rest of the step at `lx.sync()`. A graph that updates
trainable parameters in place (a compiled optimizer step) ends the step as the optimizer's
post hook does in eager code: an implied step barrier right after the call.

Design: docs/design.md, "Compiled functions: dynamo graphs become CALL nodes" and "dynamo/replay.py".
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .. import metrics
from ..donation import set_buffer_donation
from ..frontend.primitives import assign
from ..frontend.storage import Storage
from ..frontend.tensor import LazyTensor
from ..frontend.tracing import DeviceMismatchError
from ..ir.node import DATA, Node
from ..runtime.device_data import unusable_error
from ..lock import LOCK
from ..sync.api import compiled_update_done
from ..capture import Capture, capture

_TENSOR = object()   # marks a tensor slot in an output layout


class _Entry:
    """A captured signature: the program and where its tensor results go."""
    __slots__ = ("capture", "layout", "updates_parameters")

    def __init__(self, cap: Capture, layout: list, updates_parameters: bool) -> None:
        self.capture = cap
        self.layout = layout   # per graph output: _TENSOR, or the constant (None, an int) it is
        self.updates_parameters = updates_parameters   # writes into a trainable nn.Parameter


class CompiledGraph:
    """The compiled form of one AOTAutograd graph (module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, name: str) -> None:
        self.gm = gm
        self.name = name
        self.entries: dict = {}

    def __call__(self, args: list) -> list:
        with LOCK:   # one call is atomic w.r.t. syncs in other threads, like one traced op
            return self._call(args)

    def _call(self, args: list) -> list:
        tensors, positions, key = _signature(self.name, args)
        inputs = _on_device(tensors)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = self._capture(args, inputs, positions, tensors)
        cap = entry.capture
        for pos, donate in cap.donor_directives:
            set_buffer_donation(inputs[pos], donate)
        results, updates = cap.insert(_values_marking_donors(inputs))
        for pos, node in zip(cap.mutated, updates):
            _write_back(tensors[pos], inputs[pos], node)
        it = iter(results)
        outs = [next(it) if slot is _TENSOR else slot for slot in entry.layout]
        if entry.updates_parameters:
            compiled_update_done()
        return outs

    def _capture(self, args: list, inputs: list, positions: list, tensors: list) -> _Entry:
        layout: list = []

        def run(*placeholders):
            full = list(args)
            for pos, ph in zip(positions, placeholders):
                full[pos] = ph
            outs = self.gm(*full)
            results = []
            for out in outs:
                if isinstance(out, torch.Tensor):
                    layout.append(_TENSOR)
                    results.append(out)
                else:
                    layout.append(out)
            return results

        with torch.no_grad():   # AOTAutograd's graphs are already differentiated
            cap = capture(run, inputs, name=self.name)
        metrics.counter_add("CompiledGraphCaptures")
        updates = any(isinstance(tensors[pos], torch.nn.Parameter) and tensors[pos].requires_grad
                      for pos in cap.mutated)
        return _Entry(cap, layout, updates)


def _signature(name: str, args: Sequence[Any]) -> tuple[list, list, tuple]:
    """(tensor args, their positions, cache key of the call)."""
    tensors, positions, key = [], [], []
    device = None
    for i, a in enumerate(args):
        if isinstance(a, LazyTensor):
            index = a._st.device
            if index != device:
                if device is not None:
                    raise DeviceMismatchError(
                        f"lazyxla: the compiled function {name} got tensors on lazyxla:{device} and "
                        f"lazyxla:{index}; move them to one device first.")
                device = index
            tensors.append(a)
            positions.append(i)
            spec = a._mkey   # (shape, stride, offset, dtype), read once
            key.append((spec[0], spec[3]))
        elif isinstance(a, torch.Tensor):
            if a.dim() != 0 or a.device.type != "cpu":
                raise DeviceMismatchError(
                    f"lazyxla: expected all tensors to be on the lazyxla device, but the compiled "
                    f"function {name} got a {a.device} tensor of shape {list(a.shape)}. Move it "
                    "first with t.to(lx.device()).")
            tensors.append(a)
            positions.append(i)
            key.append(("host0", a.dtype))
        elif a is None or isinstance(a, (int, float, bool)):
            key.append(a)
        else:
            raise TypeError(f"lazyxla: torch.compile(...) of {name} is not supported yet: the graph "
                            f"takes a {type(a).__name__} argument")
    if device is None:
        raise DeviceMismatchError(
            f"lazyxla: the compiled function {name} got no lazyxla tensor; backend='lazyxla' runs "
            "graphs on the lazyxla device. Move the inputs there with t.to(lx.device()).")
    return tensors, positions, tuple(key)


def _on_device(tensors: list) -> list[LazyTensor]:
    """The call's tensors with 0-d CPU ones uploaded (lazy mode lifts them too); the
    CPU originals stay the write-back targets."""
    if all(isinstance(t, LazyTensor) for t in tensors):
        return tensors
    device = next(t.device for t in tensors if isinstance(t, LazyTensor))   # _signature checked one
    return [t if isinstance(t, LazyTensor) else t.to(device) for t in tensors]


def _values_marking_donors(inputs: list) -> list[Node]:
    """Each input's current value, as `checked_value()` (a donated or failed buffer raises),
    its buffer made a compiled-call donor when it is flagged for donation (module docstring):
    one pass over the inputs for both (a compiled AdamW step has 265)."""
    values = []
    for t in inputs:
        if t._view is None:
            node = t._st.value
            if node.op is DATA:
                data = node.data
                if data.donated_in is not None or data.failure is not None:
                    raise unusable_error(data)
                if data.donate:
                    data.call_donor = True
        else:
            node = t.checked_value()   # a view: not a donor of the call (whole buffers are)
        values.append(node)
    return values


def _write_back(target: torch.Tensor, used: LazyTensor, new: Node) -> None:
    """The compiled function updated `target` in place: give it the new value without
    dispatching an op (a lazy target) or by a host copy (an uploaded 0-d CPU tensor)."""
    if used is target:
        spec = target._mkey
        if new.shape == spec[0] and new.dtype == spec[3]:
            # the usual case, the new value has the input's aval (the entry is keyed by it):
            # `assign`'s cast and expand would be no-ops, and reading them off the tensor
            # costs more than the write (a compiled AdamW step writes back 212 tensors)
            target.write(new)
        else:
            assign(target, new)
    else:
        target.copy_(LazyTensor.wrap(Storage(new, used._st.device), None, new, used._mkey).cpu())
