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

from typing import Any, Optional, Sequence

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
_HOST = "host0"     # a 0-d CPU tensor's part of a call's key


class _Entry:
    """A captured signature: the program and where its tensor results go."""
    __slots__ = ("capture", "layout", "updates_parameters", "uploads", "plain_writes")

    def __init__(self, cap: Capture, layout: list, updates_parameters: bool, uploads: bool) -> None:
        self.capture = cap
        self.layout = layout   # per graph output: _TENSOR, or the constant (None, an int) it is
        self.updates_parameters = updates_parameters   # writes into a trainable nn.Parameter
        self.uploads = uploads   # takes a 0-d CPU tensor, uploaded at each call (`_on_device`)
        # per mutated input, whether its new value is written as it is (`_plain_writes`);
        # None until the first call has the new values' nodes
        self.plain_writes: Optional[list[bool]] = None


class CompiledGraph:
    """The compiled form of one AOTAutograd graph (module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, name: str) -> None:
        self.gm = gm
        self.name = name
        self.entries: dict = {}
        # the last call's key (`_signature`) and entry: a compiled step calls each graph with
        # arguments of the same shapes every step, and comparing two lists of mostly the
        # same objects costs far less than hashing a key of hundreds of (shape, dtype) pairs
        self._last: tuple[list, Optional[_Entry]] = ([], None)

    def __call__(self, args: list) -> list:
        with LOCK:   # one call is atomic w.r.t. syncs in other threads, like one traced op
            return self._call(args)

    def _call(self, args: list) -> list:
        tensors, key = _signature(self.name, args)
        last_key, entry = self._last
        if entry is None or key != last_key:
            entry = self._entry(args, tensors, key)
        inputs = _on_device(tensors) if entry.uploads else tensors
        cap = entry.capture
        for pos, donate in cap.donor_directives:
            set_buffer_donation(inputs[pos], donate)
        results, updates = cap.insert(_values_marking_donors(inputs))
        _write_backs(entry, tensors, inputs, updates)
        it = iter(results)
        outs = [next(it) if slot is _TENSOR else slot for slot in entry.layout]
        if entry.updates_parameters:
            compiled_update_done()
        return outs

    def _entry(self, args: list, tensors: list, key: list) -> _Entry:
        """The entry of `key`, captured on its first call; kept as the last call's."""
        frozen = tuple(key)
        entry = self.entries.get(frozen)
        if entry is None:
            uploads = _HOST in key
            entry = self.entries[frozen] = self._capture(args, _on_device(tensors) if uploads else tensors,
                                                         tensors, uploads)
        self._last = (key, entry)
        return entry

    def _capture(self, args: list, inputs: list, tensors: list, uploads: bool) -> _Entry:
        layout: list = []
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

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
        return _Entry(cap, layout, updates, uploads)


def _signature(name: str, args: Sequence[Any]) -> tuple[list, list]:
    """(the call's tensor arguments, its cache key): the key is flat, per lazy tensor its
    shape and dtype, per 0-d CPU tensor `_HOST` and its dtype, per other argument its value
    (a tuple or `_HOST` starts a pair, no other argument is one, so two keys are equal only
    for equal arguments). Flat, it is two appends a tensor and no tuple."""
    tensors: list = []
    key: list = []
    append = key.append
    device = None
    for a in args:
        if isinstance(a, LazyTensor):
            index = a._st.device
            if index != device:
                if device is not None:
                    raise DeviceMismatchError(
                        f"lazyxla: the compiled function {name} got tensors on lazyxla:{device} and "
                        f"lazyxla:{index}; move them to one device first.")
                device = index
            tensors.append(a)
            spec = a._mkey   # (shape, stride, offset, dtype), read once
            append(spec[0])
            append(spec[3])
        elif isinstance(a, torch.Tensor):
            if a.dim() != 0 or a.device.type != "cpu":
                raise DeviceMismatchError(
                    f"lazyxla: expected all tensors to be on the lazyxla device, but the compiled "
                    f"function {name} got a {a.device} tensor of shape {list(a.shape)}. Move it "
                    "first with t.to(lx.device()).")
            tensors.append(a)
            append(_HOST)
            append(a.dtype)
        elif a is None or isinstance(a, (int, float, bool)):
            append(a)
        else:
            raise TypeError(f"lazyxla: torch.compile(...) of {name} is not supported yet: the graph "
                            f"takes a {type(a).__name__} argument")
    if device is None:
        raise DeviceMismatchError(
            f"lazyxla: the compiled function {name} got no lazyxla tensor; backend='lazyxla' runs "
            "graphs on the lazyxla device. Move the inputs there with t.to(lx.device()).")
    return tensors, key


def _on_device(tensors: list) -> list[LazyTensor]:
    """The call's tensors with 0-d CPU ones uploaded (lazy mode lifts them too); the
    CPU originals stay the write-back targets."""
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


def _write_backs(entry: _Entry, tensors: list, inputs: list, updates: list) -> None:
    """Give each input the compiled function updated in place its new value (`updates`,
    in `mutated` order)."""
    mutated = entry.capture.mutated
    plain = entry.plain_writes
    if plain is None:
        plain = entry.plain_writes = _plain_writes(mutated, tensors, inputs, updates)
    for pos, node, as_is in zip(mutated, updates, plain):
        if as_is:
            tensors[pos].write(node)
        else:
            _write_back(tensors[pos], inputs[pos], node)


def _plain_writes(mutated: list, tensors: list, inputs: list, updates: list) -> list[bool]:
    """Per mutated input, whether its new value has the input's aval (the usual case), so
    that it is written into the tensor as it is: `assign`'s cast and expand would be no-ops,
    and reading them off the tensor costs more than the write (a compiled AdamW step writes
    back 212 tensors). Worked out once per entry: the entry's key holds each input's shape
    and dtype and whether it is a lazy tensor, and the program's outputs have fixed avals."""
    plain = []
    for pos, node in zip(mutated, updates):
        target = tensors[pos]
        spec = target._mkey if inputs[pos] is target else None
        plain.append(spec is not None and node.shape == spec[0] and node.dtype == spec[3])
    return plain


def _write_back(target: torch.Tensor, used: LazyTensor, new: Node) -> None:
    """The compiled function updated `target` in place with a value of another aval than
    its own, or `target` is an uploaded 0-d CPU tensor: give it the new value through
    `assign` (a lazy target) or by a host copy."""
    if used is target:
        assign(target, new)
    else:
        target.copy_(LazyTensor.wrap(Storage(new, used._st.device), None, new, used._mkey).cpu())
