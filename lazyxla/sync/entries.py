"""Entry values: small pending state a step barrier's graph reads as device data.

A training loop should compile its step's graph once. Later steps find their state
(optimizer step counts, running sums) as device data, the graph's parameters; the first
step, or the step after a reset, finds some of it still pending: AdamW(fused=True)'s
`step = torch.zeros(())` made inside the first `optimizer.step()`, the Trainer's loss sum
reset by `tr_loss -= tr_loss` after it logs. Folded into the step's graph, that pending
value makes another graph, and on a TPU another compile of the whole step.

So each storage remembers its entry value (frontend/storage.py `Storage.write`): the
pending value it held at the first sync point its chain of in-place writes crossed. At a step
barrier an entry value small enough to compute on the host (sync/host_eval.py's rules:
at most `host_read_max_elements` elements, deterministic ops, device inputs only scalars
whose host copies the host already holds, so nothing waits for the device) is computed
there and enters the graph as staged device data owned by the storage, in place of its
IR: the graph is the one the next step runs, donation included. Counter
`HostEntryValue`: entry values the host computed.

Design: docs/design.md, "Compile once per kind of step".
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import metrics
from ..frontend.storage import FILLS
from ..ir.build import data_node
from ..ir.node import DATA, Node
from ..runtime import placement
from ..runtime.transfer import staged
from . import host_eval, host_split


def leaves(device: int, storages: list) -> Optional[dict]:
    """{id(entry value): DATA node of its value computed on the host} for the pending
    `storages` of `device` a barrier computes (a `leaves` argument of sync/collect.py's
    `collect`); None when there is none."""
    if placement.spmd_enabled():   # staged device data carries no sharding
        return None
    roots = {st.value for st in storages}   # nodes hash by identity: no id() per storage
    found: dict = {}
    for st in storages:
        entry = st.entry
        # an entry that is itself a live tensor's value is an output of the graph anyway
        if entry is None or entry in roots or id(entry) in found:
            continue
        value = _host_value(entry)
        if value is not None:
            found[id(entry)] = data_node(staged(value, device, owner=st))
    if found:
        metrics.counter_add("HostEntryValue", len(found))
    return found or None


def _host_value(entry: Node) -> Optional[torch.Tensor]:
    """`entry`'s value computed on the host, or None where it does not qualify (module
    docstring) or the replay fails. A fill's old value is not needed, only its shape."""
    values: dict = {}
    if entry.op in FILLS:
        old = entry.inputs[0]
        values[id(old)] = torch.empty(old.shape, dtype=old.dtype)
    order = host_eval.replay_order([entry], given=values.keys())
    if order is None:
        return None
    for node in order:
        # A donated or failed input keeps raising for its readers; one the host has not
        # downloaded yet would make the barrier wait for the graph that computes it.
        if node.op is DATA and (node.data.host_copy is None or node.data.donated_in is not None
                                or node.data.failure is not None):
            return None
    if not host_eval.replay(order, values):
        return None
    return host_split.owned_value(values[id(entry)])
