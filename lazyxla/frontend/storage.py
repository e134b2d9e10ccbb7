"""Alias groups and the live-storage registry.

A `Storage` stands for one base tensor and all views onto it (PyTorch's
storage sharing). Its `value` is the base's current value as an IR node:
either a DATA leaf (device data) or pending IR. An in-place write anywhere in
the group replaces `value` and bumps `version`, so views know to re-derive
themselves from the base.

Every storage is registered per device in creation order; a sync walks this
registry (weakly held, so dead tensors drop out) to find pending values and
to learn which buffers other live tensors still hold.
"""
from __future__ import annotations

import itertools
import weakref

from ..ir.node import Node

_seq = itertools.count()
_live: dict[int, "weakref.WeakValueDictionary[int, Storage]"] = {}


class Storage:
    __slots__ = ("value", "version", "device", "seq", "__weakref__")

    def __init__(self, value: Node, device: int) -> None:
        self.value = value
        self.version = 0
        self.device = device
        self.seq = seq = next(_seq)
        reg = _live.get(device)
        if reg is None:
            reg = _live[device] = weakref.WeakValueDictionary()
        reg[seq] = self

    def write(self, value: Node) -> None:
        """Install a new base value (an in-place update or a sync result)."""
        self.value = value
        self.version += 1


def live_storages(device: int) -> list[Storage]:
    """Live storages of `device` in creation order (deterministic graph order)."""
    reg = _live.get(device)
    return list(reg.values()) if reg else []


def live_devices() -> list[int]:
    return [d for d, reg in _live.items() if len(reg)]
