"""The device-data handle: one device buffer and everything donation needs to know.

A `DeviceData` wraps one `jax.Array`; several lazy tensors (a base and its views, or
tensors synced to the same value) and IR nodes may share it. The handle, not the tensor,
carries: `donate` (the explicit donation flag, `lx.set_buffer_donation`); `read_only`
(never donated: `lx.save` data, pinned constants); `external` (None, or who outside
lazyxla also holds the buffer, `"lx.to_jax"` / `"lx.from_jax"`: never donated);
`owner` (a weak reference to the alias group that created the buffer); `donated_in`
(the graph key that consumed it: then `array` is None and every use raises
`DonatedBufferError`); `call_donor` (`donate` applies at any sync); `sharding` (SPMD
only); `host` (an upload not placed yet, placed by `array` on demand); `stored_dtype`
(the buffer's dtype); `host_copy` (a downloaded CPU copy, valid for the handle's life);
`charged` (its charge in the memory ledger, None once released); `failure` (None, or the
message of the failed graph whose result this handle stands for: then `array` is None, nothing
is charged, and every use raises `FailedOpError`; sync/failures.py makes these).

Design: docs/design.md, "runtime/device_data.py".
"""
from __future__ import annotations

import weakref
from typing import Optional

import torch

from ..errors import DonatedBufferError, FailedOpError
from ..ir.graph import byte_size
from . import memory
from .device_put import place

_ref = weakref.ref


class DeviceData:
    __slots__ = ("_array", "shape", "dtype", "stored_dtype", "device", "read_only", "donate",
                 "external", "donated_in", "owner", "call_donor", "sharding", "host", "charged", "host_copy", "failure", "__weakref__")

    def __init__(self, array, shape: tuple, dtype: torch.dtype, device: int,
                 owner=None, read_only: bool = False, sharding=None, host=None,
                 stored_dtype: Optional[torch.dtype] = None, failure: Optional[str] = None,
                 charge: bool = True, charged: Optional[tuple] = None) -> None:
        self._array = array
        self.sharding = sharding
        self.host = host
        self.host_copy: Optional[torch.Tensor] = None   # the value, downloaded (sync/host_eval.py)
        self.shape = shape
        self.dtype = dtype
        self.stored_dtype = dtype if stored_dtype is None else stored_dtype
        self.device = device
        self.read_only = read_only
        self.external: Optional[str] = None
        self.donate = False
        self.call_donor = False
        self.donated_in: Optional[str] = None
        self.owner = _ref(owner) if owner is not None else None
        self.failure = failure
        # `charged` given: known to the caller (an output plan, sync/install.py), which charges a
        # batch; a failed result has no buffer to charge
        if charged is None and failure is None:
            charged = memory.charges(shape, self.stored_dtype, device, sharding)
            if charge:   # else the caller charges a batch (memory.charge_outputs)
                memory.charge(charged)
        self.charged = charged

    def __del__(self) -> None:
        charged = self.charged
        if charged is None:   # donated (most of a step's inputs), failed, or released
            return
        release = getattr(memory, "release", None)   # None at interpreter exit (module or its globals)
        if release is not None:
            self.charged = None
            release((charged,))

    @property
    def array(self):
        """The device buffer (placing a staged upload first); None once donated."""
        if self._array is None and self.host is not None:
            self._array = place(self.host, self.sharding, self.device)
            self.host = None
        return self._array

    def __copy__(self) -> "DeviceData":
        # A handle names one immutable buffer: a copy is the same handle. Copying the slots
        # would charge the buffer once and release it twice (copy.deepcopy of a model).
        return self

    def __deepcopy__(self, memo: dict) -> "DeviceData":
        return self

    def placed(self, array) -> None:
        """A staged upload's device buffer, placed by the caller (transfer.place_staged)."""
        self._array, self.host = array, None

    @property
    def nbytes(self) -> int:
        return byte_size(self.shape, self.stored_dtype)

    @property
    def is_donated(self) -> bool:
        return self.donated_in is not None

    def owner_storage(self):
        return self.owner() if self.owner is not None else None

    def live_array(self):
        """The buffer, or a clear error if it was donated or its graph failed."""
        if self.donated_in is not None or self.failure is not None:
            raise unusable_error(self)
        return self.array

    def mark_donated(self, graph_key: str) -> None:
        mark_all_donated([self], graph_key)

    def __repr__(self) -> str:
        state = (f"donated in graph {self.donated_in}" if self.donated_in else
                 "failed" if self.failure is not None else "live")
        where = "" if self.sharding is None else f", sharding={self.sharding}"
        if self.stored_dtype != self.dtype:
            where += f", stored as {self.stored_dtype}"
        return (f"DeviceData(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}{where}, "
                f"{state}, donate={self.donate}, read_only={self.read_only})")


def mark_all_donated(datas: list, graph_key: str) -> int:
    """`datas` consumed by graph `graph_key`: each handle dead, its buffer released from the
    ledger (one update for all: a step donates hundreds) and deleted. Their bytes."""
    released = []
    nbytes = 0
    for data in datas:
        charged = data.charged
        # a single-device buffer's charge is its bytes (no second computation per donor)
        nbytes += charged[0][1] if charged is not None and data.sharding is None else \
            byte_size(data.shape, data.stored_dtype)
        data.donated_in = graph_key
        array, data._array, data.host, data.host_copy = data._array, None, None, None
        if charged is not None:
            released.append(charged)
            data.charged = None
        # JAX deletes donated inputs itself where the backend supports donation;
        # deleting here makes the semantics identical on every backend.
        if array is not None and not array.is_deleted():
            array.delete()
    if released:
        memory.release(released)
    return nbytes


def donated_error(data: DeviceData) -> DonatedBufferError:
    return DonatedBufferError(
        f"lazyxla: the device buffer of this tensor (shape={list(data.shape)}, dtype={data.dtype}) "
        f"was donated in graph {data.donated_in} and no longer exists. A donated tensor cannot be "
        "read or used again. To keep it usable, do not mark it with lx.set_buffer_donation "
        "(or call lx.set_buffer_donation(t, False) before the sync), or clone it before the sync "
        "that donates it."
    )


def unusable_error(data: DeviceData) -> RuntimeError:
    """What a use of a handle without a buffer raises: the failure it carries (a fresh error
    each time, so tracebacks do not pile up on one object), else `DonatedBufferError`."""
    if data.failure is not None:
        return FailedOpError(data.failure)
    return donated_error(data)
