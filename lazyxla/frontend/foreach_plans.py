"""Plans of foreach calls: what each list element's node is, decided once per call signature.

foreach.py runs a `torch._foreach_*` call as one single-tensor handler call per element,
and each builds its element's shape-inference key and looks it up (frontend/tracing.py).
A training step makes the same foreach calls with the same element metadata every step,
so that work is done once per call *signature* and kept as a `CallPlan`: per element its
`MetaEntry` (the node's signature) and its constant arguments. The signature (`call_key`)
is the foreach op, the kwargs' names and per argument: the elements' `_mkey`s (a list of
lazy tensors), the type of each lifted scalar (a Scalar or ScalarList: lifted per call,
as the element path does), or the value of a constant. A call that finds its plan
(`replay`) only does what every call must: reads each operand's current node element by
element (so an element reads what an earlier one of the same call wrote, as in eager;
donated and failed buffers raise), lifts its scalars, makes the nodes with the planned
signatures and writes them into `self` (through views) or wraps them as fresh outputs.
These are the nodes the element path makes, so graphs and their compile keys are too.

Planned only where the element path is exactly "convert, look up, make one node": element
handlers `functional` and `inplace` (plus the write-back of an in-place foreach op whose
single-tensor op is functional, `_foreach_maximum_`), every element argument a lazy
tensor, a Python number or a constant. Host tensors (uploaded or refused by the element
path), lists holding tensors inside an element, ints beyond int64 and other handlers
(copy_, decompositions) stay on the element path. A plan is made at a signature's second
call, from the element path's own conversion of each element; eager's errors (shapes,
dtypes, internal overlap of a written view) were raised at the element path's calls,
and any call whose signature differs (a shape, a scalar's type) takes that path again.
Devices are read once per call, where there are several: an element whose operands are
on two devices raises at that element, after the earlier ones ran, as on the element path.
Nothing to decide for autocast (PyTorch's autocast lists hold no foreach op, so they fall
through its key) nor math bits (a node holds a tensor's logical value on both paths:
frontend/mathbits.py); views are planned like any tensor (their `_mkey` keys them, and
`LazyTensor.write` writes through them).
"""
from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Optional

import torch

from .. import metrics
from ..ir.bounded import BoundedTable
from ..ir.build import traced_node
from ..ir.node import Node
from .device import DEVICES
from .primitives import assign, functional, inplace
from .tensor import LazyTensor
from .tracing import META_CACHE, convert_call, device_mismatch, lift_scalar, liftable, lookup, wrap_outputs

_counters = metrics._counters
PLANS_CAP = 4096
PLANS = BoundedTable(PLANS_CAP)   # call key -> CallPlan
_MET = BoundedTable(PLANS_CAP)    # call keys met once (True), or never plannable (False)

# What an argument is, per call (the first item of its part of the call key)
TENSORS, TENSOR = "tensors", "tensor"          # a lazy tensor per element / one for all
SCALARS, SCALAR = "scalars", "scalar"          # lifted Python numbers: one per element / one for all
CONSTANTS, CONSTANT = "constants", "constant"  # node constants: one per element / one for all
_OPERANDS = frozenset((TENSORS, TENSOR, SCALARS, SCALAR))
# How an element's node lands: written into self, assigned (converted) into self, or new outputs
WRITE, ASSIGN, WRAP = "write", "assign", "wrap"
_SCALAR_TYPES = (float, int, bool, complex)
_ANY_VALUE = frozenset((float, bool, complex))   # always lifted (an int only within int64)
_CONSTANT_TYPES = frozenset((type(None), bool, int, float, complex, str, torch.dtype, torch.layout,
                             torch.memory_format))


def mode_of(element_handler, write_back: bool) -> Optional[str]:
    """How a planned element's node lands, by its single-tensor op's handler; None: that
    handler does more than one node (the call stays on the element path)."""
    if element_handler is inplace and not write_back:
        return WRITE
    if element_handler is functional:
        return ASSIGN if write_back else WRAP
    return None


class _Unplannable(Exception):
    """An argument that keeps the call on the element path (module docstring)."""


def _constant(value):
    """The key of a value the element path keeps as a constant of the node: as fine as
    tracing.convert's (types apart, floats by their bits). A device stays on the element
    path (convert keys it by its type, not its index)."""
    tp = type(value)
    if tp is list or tp is tuple:
        return tuple(map(_constant, value))
    if tp not in _CONSTANT_TYPES:
        raise _Unplannable
    return (tp, value.hex()) if tp is float else (tp, value)


def _part(value, n: int, scalar_slot: bool) -> tuple:
    """One argument's part of the call key."""
    tp = type(value)
    if (tp is list or tp is tuple) and len(value) == n:
        if isinstance(value[0], LazyTensor):
            try:
                return TENSORS, tuple([t._mkey for t in value])
            except AttributeError:   # not all lazy: the element path uploads or refuses the others
                raise _Unplannable from None
        if scalar_slot and type(value[0]) in _SCALAR_TYPES:
            types = tuple(map(type, value))
            if not _ANY_VALUE.issuperset(types) and not all(map(liftable, value)):
                raise _Unplannable
            return SCALARS, types
        return CONSTANTS, tuple(map(_constant, value))
    if isinstance(value, LazyTensor):   # one tensor for every element (_foreach_mul_.Tensor)
        return TENSOR, value._mkey
    if scalar_slot and tp in _SCALAR_TYPES:
        if not liftable(value):
            raise _Unplannable
        return SCALAR, tp
    return CONSTANT, _constant(value)


def call_key(fplan, args: tuple, kwargs: dict, n: int) -> Optional[tuple]:
    """The signature of a foreach call of `n` elements (foreach.py's `_Plan` and the call's
    arguments, split as its single-tensor op takes them), or None where the call stays on
    the element path."""
    if fplan.mode is None or not n:
        return None
    info = fplan.info
    slots = info.scalar_slots
    try:
        parts = [fplan, tuple(kwargs)]
        for i, a in enumerate(args):
            parts.append(_part(a, n, i < len(slots) and slots[i]))
        if kwargs:
            skw = info.scalar_kw
            for k, v in kwargs.items():
                parts.append(_part(v, n, k in skw))
    except _Unplannable:
        return None
    return tuple(parts)


class CallPlan:
    """Per element of one call signature, its node's signature (`entries`), and per argument
    slot (positional ones, then keyword ones) its kind (`kinds`) and, for constants, its
    value per element (`constants`, None for operand slots). `inputs`: picks the node's
    inputs from its arguments (None where they are all its positional arguments)."""
    __slots__ = ("op", "mode", "entries", "kinds", "constants", "npos", "kw_names", "reads", "inputs")

    def __init__(self, op, mode: str, kinds: list, entries: list, templates: list, npos: int,
                 kw_names: tuple) -> None:
        self.op, self.mode, self.entries, self.kinds = op, mode, entries, tuple(kinds)
        self.npos, self.kw_names = npos, kw_names
        self.constants = tuple(None if k in _OPERANDS else [t[j] for t in templates] for j, k in enumerate(kinds))
        self.reads = tuple(j for j, k in enumerate(kinds) if k is TENSORS or k is TENSOR)
        inputs = [j for j, k in enumerate(kinds) if k in _OPERANDS]
        self.inputs = (None if not kw_names and len(inputs) == len(kinds)
                       else itemgetter(*inputs) if len(inputs) > 1 else lambda vals: (vals[inputs[0]],))


def met(fplan, key: tuple, elements: list) -> None:
    """A call of signature `key` ran element by element (`elements`: each element's
    (args, kwargs), as its handler got them). The second time, it is planned: a signature
    met once (a constant that changes every call) costs no plan. One that cannot be
    planned is remembered as such (False), so that it is not tried again."""
    seen = _MET.get(key)
    if seen is None:
        _MET.put(key, True)
    elif seen:
        plan = _plan(fplan, key, elements)
        if plan is None:
            _MET[key] = False
        else:
            del _MET[key]
            PLANS.put(key, plan)
            _counters["ForeachPlanBuilt"] += 1


def _plan(fplan, key: tuple, elements: list) -> Optional[CallPlan]:
    kinds = [part[0] for part in key[2:]]
    if fplan.mode is not WRAP and kinds[0] is not TENSORS:
        return None   # written elements: `self` is a list of lazy tensors
    operand = [k in _OPERANDS for k in kinds]
    info = fplan.info
    entries, templates = [], []
    for el_args, el_kwargs in elements:
        nargs, nkw, inputs, el_key, _ = convert_call(info, el_args, el_kwargs)
        values = nargs + tuple(nkw.values()) if nkw else nargs
        if [type(v) is Node for v in values] != operand or tuple(v for v in values if type(v) is Node) != inputs:
            return None   # converted otherwise than the kinds say: the element path decides
        # the element path's entry (made at its call, eager's errors raised there)
        entries.append(META_CACHE.get(el_key) or lookup(el_key, fplan.target, el_args, el_kwargs))
        templates.append(values)
    op = info.functional if fplan.mode is WRITE else fplan.target
    return CallPlan(op, fplan.mode, kinds, entries, templates, len(elements[0][0]), tuple(elements[0][1]))


def _devices(plan: CallPlan, values: tuple, n: int) -> tuple:
    """Each element's device (its first tensor operand's, as tracing.convert_call takes it)
    and the first element whose tensor operands are on two devices (n: none). A tensor's
    device never changes during a call, so this is read once, by slot."""
    slots = [[t._st.device for t in values[j]] if plan.kinds[j] is TENSORS else [values[j]._st.device] * n
             for j in plan.reads]
    first, bad = slots[0], n
    for other in slots[1:]:
        if other != first:
            bad = min(bad, next(i for i, (a, b) in enumerate(zip(first, other)) if a != b))
    return first, bad


def replay(fplan, plan: CallPlan, args: tuple, kwargs: dict, n: int) -> list:
    """Run a planned call: the element path's nodes (module docstring). Returns the new
    outputs of each element (none for calls that write into self)."""
    _counters["ForeachPlanReused"] += 1
    values = args + tuple(kwargs.values()) if kwargs else args
    # per slot, its value for each element: tensors (read per element below), lifted
    # scalars (one object each, or one for the whole call), constants
    columns = list(plan.constants)
    for j, kind in enumerate(plan.kinds):
        v = values[j]
        if kind is TENSORS:
            columns[j] = v
        elif kind is TENSOR:
            columns[j] = repeat(v)
        elif kind is SCALARS:
            columns[j] = [lift_scalar(x) for x in v]
        elif kind is SCALAR:
            columns[j] = repeat(lift_scalar(v))
    if len(DEVICES) > 1:
        devices, bad = _devices(plan, values, n)
    else:   # one device: every lazy tensor is on it
        devices, bad = repeat(0), n
    op, mode, npos, kw_names, reads, slots = plan.op, plan.mode, plan.npos, plan.kw_names, plan.reads, plan.inputs
    one_kw = kw_names[0] if len(kw_names) == 1 else None
    selves = values[0]
    results = []
    for i, (el, entry, device) in enumerate(zip(zip(*columns), plan.entries, devices)):
        vals = list(el)
        for j in reads:
            vals[j] = vals[j].checked_value()   # now: an earlier element may have written it
        if i == bad:
            raise device_mismatch(fplan.info, [el[j]._st.device for j in reads])
        if kw_names:   # (a dict display for the usual one keyword: dict(zip()) costs 0.5 us more)
            nargs = tuple(vals[:npos])
            nkw = {one_kw: vals[npos]} if one_kw is not None else dict(zip(kw_names, vals[npos:]))
        else:
            nargs, nkw = tuple(vals), None
        node = traced_node(op, nargs, nkw, nargs if slots is None else slots(vals), entry)
        if mode is WRITE:
            selves[i].write(node)
        elif mode is ASSIGN:
            assign(selves[i], node)   # the element path's copy_ of its result into self
        else:
            results.append(wrap_outputs(node, entry, device))
    return results
