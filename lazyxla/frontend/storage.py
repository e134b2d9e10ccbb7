"""Alias groups and the live-storage registry.

A `Storage` stands for one base tensor and all views onto it (PyTorch's
storage sharing). Its `value` is the base's current value as an IR node:
either a DATA leaf (device data) or pending IR. An in-place write anywhere in
the group replaces `value` and bumps `version`, so views know to re-derive
themselves from the base.

Every storage is registered per device in creation order; a sync walks this
registry (weakly held, so dead tensors drop out) to find pending values and
to learn which buffers other live tensors still hold.

The registry is an append-only list of plain weak references, compacted when
read (and when it doubles), rather than a WeakValueDictionary: registration is
on the per-op hot path, and a weakref without callback is the cheapest handle.
"""
from __future__ import annotations

import itertools
import weakref

import torch

from ..ir.node import DATA, Node
from ..runtime.device_data import donated_error
from ..state import STATE

_seq = itertools.count()
_live: dict[int, list] = {}
_compact_at: dict[int, int] = {}
_ref = weakref.ref
_deref = weakref.ReferenceType.__call__
# Functional forms of the in-place fills: the written value does not depend on the old one
# (its first operand), whose shape and dtype alone they read.
FILLS = frozenset((torch.ops.aten.fill.Scalar, torch.ops.aten.fill.Tensor, torch.ops.aten.zero.default))
# their ids, for `Storage.write` (an OpOverload's __hash__ is a Python call; the set holds
# the ops, so no other object can have their ids)
_FILL_IDS = frozenset(map(id, FILLS))


class Storage:
    __slots__ = ("value", "version", "device", "seq", "base_spec", "last_data", "entry", "entry_epoch",
                 "__weakref__")

    def __init__(self, value: Node, device: int) -> None:
        self.value = value
        # weakly, the device data this storage held before its value became pending: what a
        # failed sync returns it to (sync/failures.py), while anything (the pending update
        # reading it, as every in-place update does) still holds the buffer
        self.last_data = None
        # The pending value this storage held at the first sync point its chain of
        # in-place writes crossed, or the value of a write that started it afresh (None:
        # device data), and the STATE.sync_epoch of the first write after that point: a
        # barrier reads a small one as device data, so fresh state gives the later steps'
        # graph (sync/entries.py). It never holds a node the value does not reach.
        self.entry = None
        self.entry_epoch = -1
        # (shape, stride, offset, dtype) of the base tensor, set by LazyTensor.wrap: how
        # the base's values lie in the storage, which as_strided and resize_ address.
        self.base_spec = None
        self.version = 0
        self.device = device
        self.seq = next(_seq)
        STATE.pending_work = True   # a new storage: the next step barrier looks (sync/api.py `_barrier`)
        reg = _live.get(device)
        if reg is None:
            reg = _live[device] = []
            _compact_at[device] = 4096
        reg.append(_ref(self))
        if len(reg) > _compact_at[device]:
            live_storages(device)

    def write(self, value: Node) -> None:
        """Install a new base value (an in-place update or a sync result)."""
        old = self.value
        if old is not None and old.op is DATA:
            if old.data.donated_in is not None:
                # Writing into a donated tensor (or a view of one) is a use of it: raise
                # instead of silently reviving it (a partial write would also read the
                # dead buffer at the next sync).
                raise donated_error(old.data)
            if value.op is not DATA:
                self.last_data = _ref(old.data)
        if value.op is DATA:
            self.entry = None   # device data again (a sync's result, an upload)
        else:
            STATE.pending_work = True
            if id(value.op) in _FILL_IDS or not value.inputs or value.inputs[0] is not old:
                # A fresh start: the new value does not read the old one (copy_), or reads only
                # its shape (a fill: `torch.zeros(..., device=...)` is an allocation, then
                # zero_()). An in-place op's functional node reads the old value first.
                self.entry, self.entry_epoch = value, STATE.sync_epoch
            elif self.entry is None and self.entry_epoch != STATE.sync_epoch:
                # the first sync point the chain crosses sets it, later ones keep it: a
                # running sum reset after a log and added to once per micro-batch (a read
                # between each) then enters as the reset, as the steady steps' sum enters
                # as last step's buffer (docs/design.md, "Compile once per kind of step")
                self.entry_epoch = STATE.sync_epoch
                self.entry = old if old.op is not DATA else None
        self.value = value
        self.version += 1

    def rebuild(self, value: Node, entry: Node | None) -> None:
        """The same pending value (and entry value), rebuilt to read device data a read
        computed for it (sync/crossing.py): not a write, so no version or entry change."""
        self.value = value
        self.entry = entry


# Storages whose host read materialises all pending work of their device, not just
# their own value (frontend/grad_scaler.py: GradScaler's found_inf, read by `.item()`
# between the backward pass and the optimizer step, would otherwise run the forward
# and backward pass in a graph of its own and again in the step's graph).
_wide_reads: "weakref.WeakSet[Storage]" = weakref.WeakSet()


def mark_wide_read(st: Storage) -> None:
    _wide_reads.add(st)


def is_wide_read(st: Storage) -> bool:
    return st in _wide_reads


def live_storages(device: int) -> list[Storage]:
    """Live storages of `device` in creation order (deterministic graph order)."""
    reg = _live.get(device)
    if not reg:
        return []
    # dereferenced and filtered in C (no bytecode per storage: a step barrier reads it twice a
    # step); a Storage is always true (it defines neither __bool__ nor __len__)
    alive = list(filter(None, map(_deref, reg)))
    if len(alive) < len(reg):   # compacted only when a storage died (a barrier reads it twice a step)
        reg[:] = [_ref(st) for st in alive]
    _compact_at[device] = max(4096, 2 * len(reg))
    return alive


def live_devices() -> list[int]:
    return [d for d, reg in _live.items() if reg]
