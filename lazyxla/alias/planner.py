"""Which parameters of a graph are donated, and why the others are not.

Donor set = automatic donors ∪ explicit donors, sorted, minus buffers that must survive:
* automatic, at syncs that allow it (step barriers, `sync_tensors(donate_inplace=True)`):
  the owner storage no longer holds the buffer after this graph (updated in place, or a
  dead input: owner gone or moved on), and an output of matching shape/dtype can reuse it;
* explicit: the buffer carries the donate flag, at step barriers always, at other syncs only
  with explicit donation enabled for the device, or when it was marked and passed to a
  compiled function (`call_donor`);
* kept: read-only buffers, buffers shared with JAX (DeviceData.external), and buffers that
  another live tensor holds, directly or through pending computation this graph does not
  compute. With aliasing off nothing is donated.

Design: docs/design.md, "Donation planner" and "alias/planner.py".
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Iterator, Optional

from .. import metrics
from ..ir.graph import Graph, byte_size, data_reachable
from ..ir.node import DATA


class Decision:
    """Donation verdict for one parameter buffer of a graph. It keeps the buffer's shape and
    dtypes, never the handle: a report must not keep a buffer alive. `nbytes` is computed
    when read (a report), not for every parameter of every graph."""
    __slots__ = ("index", "shape", "dtype", "stored_dtype", "donated", "kind", "reason")

    def __init__(self, index: int, data, donated: bool, kind: Optional[str], reason: str) -> None:
        self.index = index
        self.shape = data.shape
        self.dtype = data.dtype
        self.stored_dtype = data.stored_dtype
        self.donated = donated
        self.kind = kind
        self.reason = reason

    @property
    def nbytes(self) -> int:
        return byte_size(self.shape, self.stored_dtype)

    def as_dict(self) -> dict:
        return {"param": self.index, "shape": list(self.shape), "dtype": str(self.dtype),
                "bytes": self.nbytes, "donated": self.donated, "kind": self.kind, "reason": self.reason}


def _describe_holder(st) -> str:
    node = st.value
    shape = list(node.shape) if not node.nout else "multi"
    return f"live tensor #{st.seq} (shape={shape}, dtype={node.dtype})"


# (graph key's id, sync kind, aliasing, per-parameter facts) -> (donors, decisions): a step's graph
# meets the same facts every step, and its plan is then the last one's (`DonorPlanReused`)
_PLANS_KEPT = 8
_plans: OrderedDict = OrderedDict()


def plan_donors(graph: Graph, targets: list, live: list, *, automatic: bool, explicit: bool, aliasing: bool,
                kind: str, auto_owners: Optional[set] = None, written: frozenset = frozenset()) -> tuple[tuple, list]:
    """Returns (sorted donor indices, one Decision per parameter). `targets`: the
    `(storage, output slot)` pairs the graph's results go to (sync/collect.py). `auto_owners`: ids of
    the only storages whose buffers may be automatic donors (a host read's graph donates
    for the live tensors it materializes alongside, never for what it reads); None: any.
    `written`: ids of storages the same sync gives new values computed on the host
    (sync/host_split.py): like the graph's outputs, they no longer hold or need anything.
    A graph whose key, kind and per-parameter facts (`_facts`) were planned before gets
    that plan back, decisions included (they hold no handle)."""
    metrics.counter_add("DonorPlan")
    facts = tuple(_facts(graph, targets, live, automatic, explicit, auto_owners, written))
    key = (graph.key_id, kind, aliasing, facts)
    plan = _plans.get(key)
    if plan is not None:
        metrics.counter_add("DonorPlanReused")
        _plans.move_to_end(key)
        return plan
    plan = _plans[key] = _decide(graph, facts, aliasing, kind)
    while len(_plans) > _PLANS_KEPT:
        _plans.popitem(last=False)
    return plan


def _facts(graph: Graph, targets: list, live: list, automatic: bool, explicit: bool,
           auto_owners: Optional[set], written: frozenset) -> Iterator[tuple]:
    """Per parameter, in order, what its verdict reads of the live state besides the graph's
    structure (its avals and the outputs' avals are in the graph key), as one plain tuple (a
    step's graph has hundreds of parameters): whether its owner keeps it, automatic donor,
    explicit donor, its donate flag, read-only, who outside shares it (`external`), needed
    by pending work, and who else holds it ("" for no one, else as the reason says it)."""
    outputs = {id(st) for st, _ in targets} | written
    direct: dict = {}
    pending_roots = []
    for st in live:
        if id(st) in outputs:
            continue
        value = st.value
        if value.op is DATA:
            direct.setdefault(id(value.data), []).append(st)
        else:
            pending_roots.append(value)
    needed_by_pending = data_reachable(pending_roots) if pending_roots else set()
    for data in graph.params:
        owner = data.owner_storage()
        # Without orphans, a tensor updated in place after its buffer was installed
        # by a temporary (host fallback of index_copy_, copy_ from a dead tensor)
        # could never be aliased again: 2x memory on every later step.
        owner_keeps_it = (owner is not None and id(owner) not in outputs
                          and owner.value.op is DATA and owner.value.data is data)
        is_auto = automatic and not owner_keeps_it and (
            auto_owners is None or (owner is not None and id(owner) in auto_owners))
        # Live tensors outside the outputs that would lose their data. The owner may
        # keep holding an explicitly marked buffer (it is the marked tensor:
        # lx.set_buffer_donation makes the marker the owner); anyone else may not,
        # also when the buffer is an automatic donor too (a copy_ made after marking).
        held = direct.get(id(data))
        holders = [h for h in held if h is not owner] if held else ()
        yield (owner_keeps_it, is_auto, data.donate and (explicit or data.call_donor), data.donate,
               data.read_only, data.external, id(data) in needed_by_pending,
               ", ".join([_describe_holder(h) for h in holders[:3]]) if holders else "")


def _decide(graph: Graph, facts: tuple, aliasing: bool, kind: str) -> tuple[tuple, list]:
    """(donors, decisions) from each parameter's facts."""
    free_outputs = Counter((graph.order[p].shape, graph.order[p].dtype) for p in graph.outputs)
    donors = []
    decisions = []
    for i, (data, fact) in enumerate(zip(graph.params, facts)):
        owner_keeps_it, is_auto, is_explicit, donate, read_only, external, needed, holders = fact
        reason = ""
        if not aliasing:
            reason = "aliasing is off (lx.set_aliasing / LAZYXLA_ALIASING=0)"
        elif not (is_auto or is_explicit):
            if donate:
                reason = (f"marked for donation, but explicit donation is not enabled at a {kind} "
                          "(lx.set_explicit_donation(True) or use lx.sync())")
            elif not owner_keeps_it:
                reason = f"no longer needed after this graph, but a {kind} does not donate automatically"
            else:
                reason = ("held by its tensor, which this graph does not update in place, "
                          "and not marked for donation")
        elif read_only:
            reason = "read-only buffer"
        elif external is not None:
            reason = f"shared with JAX ({external}): never donated"
        elif needed:
            reason = "still needed by pending computation of another live tensor"
        elif holders:
            reason = "also held by " + holders
        aval = (data.shape, data.dtype)
        if not reason and is_auto and not is_explicit and free_outputs[aval] <= 0:
            reason = "no output of matching shape/dtype to reuse the buffer"
        if reason:
            decisions.append(Decision(i, data, False, None, reason))
            continue
        if free_outputs[aval] > 0:
            free_outputs[aval] -= 1
            note = "reused by an output"
        else:
            note = "freed by the graph (no output of matching shape/dtype)"
        kind_name = "automatic+explicit" if (is_auto and is_explicit) else ("automatic" if is_auto else "explicit")
        decisions.append(Decision(i, data, True, kind_name, note))
        donors.append(i)
    return tuple(donors), decisions
