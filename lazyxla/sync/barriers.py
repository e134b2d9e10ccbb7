"""Materialization points lazyxla places itself: implied step barriers and wide host reads.

Real training code (Hugging Face Trainer, accelerate, plain loops that only read the loss)
never calls `lx.sync()`. This module holds the rules that keep its pending work bounded
and computed once (docs/design.md "Real code places no barriers"):

- `optimizer.step()` on lazy parameters ends a step: an implied step barrier, with the
  donation of `lx.sync()`. Not inside compiled code (dynamo traces the hook away), nor
  while a function is captured (gradient accumulation, scan, while_loop bodies).
- a host read also materializes every live pending tensor that shares pending work with
  what it reads (`sharing_items`), or (LAZYXLA_CROSSING_READS=1) what that tensor needs
  from the read (sync/crossing.py), so that work is never computed twice.
- the graph-size cap (`LAZYXLA_GRAPH_OP_LIMIT`) warns once, then cuts: never silent growth.

One switch (`set_implied_barriers`, `LAZYXLA_IMPLIED_BARRIERS`) turns the first two off:
then barriers are only where the user writes them and a read computes only what it reads,
as before. Every barrier lazyxla placed is counted (`ImpliedBarrier`) and recorded with
its reason and the user's line (`lx.debug.implied_barriers()`).
"""
from __future__ import annotations

import collections
import warnings
from typing import NamedTuple, Optional

from .. import config, metrics
from ..frontend.provenance import user_frame
from ..frontend.tensor import LazyTensor
from ..frontend.storage import live_storages
from ..ir.node import DATA
from ..ir.walk import is_leaf, post_order, reaching
from ..state import STATE

RECORDS_KEPT = 64


class BarrierRecord(NamedTuple):
    """One barrier lazyxla placed: why, the user's `file:line` (None if unknown), and the
    number of IR nodes the barrier's graphs computed."""
    reason: str
    where: Optional[str]
    nodes: int


_records: collections.deque = collections.deque(maxlen=RECORDS_KEPT)


def set_implied_barriers(enabled: bool) -> None:
    """Switch implied step barriers at `optimizer.step()` and wide host reads on or off
    (the run-time state's `implied_barriers` mode; until set, LAZYXLA_IMPLIED_BARRIERS)."""
    STATE.set("implied_barriers", bool(enabled))


def implied_barriers_enabled() -> bool:
    enabled = STATE.implied_barriers
    return config.SETTINGS.implied_barriers if enabled is None else enabled


def record(reason: str, nodes: int) -> None:
    metrics.counter_add("ImpliedBarrier")
    _records.append(BarrierRecord(reason, user_frame(), nodes))


def recent() -> list[BarrierRecord]:
    """The last barriers lazyxla placed (at most RECORDS_KEPT), oldest first."""
    return list(_records)


def clear_records() -> None:
    _records.clear()


def warn_graph_size(limit: int) -> None:
    """The cap was reached: say so once per process, with the fix."""
    if STATE.size_warning_given:
        return
    STATE.size_warning_given = True
    warnings.warn(
        f"lazyxla: {limit} ops were traced without a step barrier, so lazyxla ran the pending "
        "work as a graph here (an implied barrier, counted in ImpliedBarrier). A loop that "
        "never syncs makes each read compile a larger graph: call lx.sync() (or "
        "optimizer.step(), which ends a step) once per iteration, or raise "
        "LAZYXLA_GRAPH_OP_LIMIT if the step really is this long.", stacklevel=4)


def has_lazy_params(optimizer) -> bool:
    """Whether `optimizer` updates lazy tensors (its first parameter decides)."""
    for group in getattr(optimizer, "param_groups", ()):
        for p in group.get("params", ()):
            return isinstance(p, LazyTensor)
    return False


def sharing_items(device: int, roots: list, own: set) -> tuple[dict, list]:
    """(each computed node of `roots`' pending IR -> its position; `(value, storage)` for
    each live pending storage of `device`, other than those in `own` (ids), whose pending
    IR shares a computed node with `roots`).

    Leaves (device data, lifted scalars) do not count as shared work. One walk marks the
    read's nodes; `reaching` (ir/walk.py) then asks of each storage's IR whether it holds
    a marked node, in walks that share one index. Both stop at leaves, so the cost is the
    size of the pending graph once, whatever the number of storages."""
    read = _computed_nodes(roots)
    if not read:
        return read, []
    shares = reaching(read, skip=is_leaf)
    return read, [(st.value, st) for st in live_storages(device)
                  if st.value.op is not DATA and id(st) not in own and shares(st.value)]


def pending_nodes(roots: list) -> int:
    """Number of computed (not leaf) nodes of `roots`' pending IR."""
    return len(_computed_nodes(roots))


def _computed_nodes(roots: list) -> dict:
    """Each computed (not leaf) node of `roots`' pending IR -> its position."""
    index: dict = {}
    for _ in post_order(roots, index, stop=is_leaf):
        pass
    return index
