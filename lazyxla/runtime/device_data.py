"""The device-data handle: one device buffer and everything donation needs to know.

A `DeviceData` wraps one `jax.Array`. Several lazy tensors (a base and its
views, or two tensors that were synced to the same value) and several IR nodes
may refer to the same handle; the handle, not the tensor, carries

* `donate`: the explicit donation flag (`lx.set_buffer_donation`). It belongs
  to the buffer, so it survives syncs that do not recompute the tensor, and a
  recomputed tensor gets a fresh, unflagged handle.
* `read_only`: never donated (data saved with `lx.save`, pinned constants).
* `external`: None, or who outside lazyxla also holds the buffer (`"lx.to_jax"`,
  `"lx.from_jax"`): such a buffer is never donated, automatically or explicitly,
  since JAX may still read it (jax_interop/buffers.py).
* `owner`: a weak reference to the frontend's alias group (a base tensor and
  its views) that created the buffer. Automatic aliasing donates a buffer when
  its owner is recomputed by the graph, i.e. it was updated in place.
* `donated_in`: the graph key that consumed the buffer; after donation
  `array` is None and every use raises `DonatedBufferError`.
* `call_donor`: the buffer was marked when a compiled function (torch.compile)
  was called on it: its `donate` flag then applies at any sync, also without
  explicit donation enabled (API.md "Compiled functions").
* `sharding`: SPMD mode only (runtime/placement.py): the `jax.sharding.Sharding`
  of the buffer over all devices; None outside SPMD (one local device).
* `host`: an upload not placed yet, kept as a host array until a graph (or a read)
  first needs it; `array` places it on demand. In SPMD mode every host tensor
  copied to the device is staged so, so that marking it right after `.to(dev)`
  places only each device's slice instead of a full copy on every device first;
  outside it, values the host computed for a read (sync/host_split.py) are, and
  may never reach the device at all.
* `storage`: the dtype of the buffer itself: `dtype` (what torch reports), or a narrower
  one under a storage dtype policy (runtime/storage_dtypes.py).
* `host_copy`: a CPU copy of the value, kept once a small read downloaded it
  (sync/host_eval.py); valid for the handle's life, since the buffer never changes.
* `charged`: what the buffer is charged in the memory ledger (runtime/memory.py),
  released when it is donated or the handle dies; None once released.
"""
from __future__ import annotations

import weakref
from typing import Optional

import torch

from ..errors import DonatedBufferError
from . import memory
from .device_put import place


class DeviceData:
    __slots__ = ("_array", "shape", "dtype", "storage", "device", "read_only", "donate",
                 "external", "donated_in", "owner", "call_donor", "sharding", "host", "charged", "host_copy", "__weakref__")

    def __init__(self, array, shape: tuple, dtype: torch.dtype, device: int,
                 owner=None, read_only: bool = False, sharding=None, host=None,
                 storage: Optional[torch.dtype] = None) -> None:
        self._array = array
        self.sharding = sharding
        self.host = host
        self.host_copy: Optional[torch.Tensor] = None   # the value, downloaded (sync/host_eval.py)
        self.shape = shape
        self.dtype = dtype
        self.storage = dtype if storage is None else storage
        self.device = device
        self.read_only = read_only
        self.external: Optional[str] = None
        self.donate = False
        self.call_donor = False
        self.donated_in: Optional[str] = None
        self.owner = weakref.ref(owner) if owner is not None else None
        self.charged = memory.charges(shape, self.storage, device, sharding)
        memory.charge(self, self.charged)

    def __del__(self) -> None:
        charged = self.charged
        release = getattr(memory, "release", None)   # None at interpreter exit (module or its globals)
        if charged is not None and release is not None:
            self.charged = None
            release(id(self), charged)

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
        n = self.storage.itemsize
        for d in self.shape:
            n *= d
        return n

    @property
    def is_donated(self) -> bool:
        return self.donated_in is not None

    def owner_storage(self):
        return self.owner() if self.owner is not None else None

    def live_array(self):
        """The buffer, or a clear error if it was donated."""
        if self.donated_in is not None:
            raise donated_error(self)
        return self.array

    def mark_donated(self, graph_key: str) -> None:
        self.donated_in = graph_key
        array, self._array, self.host, self.host_copy = self._array, None, None, None
        if self.charged is not None:
            memory.release(id(self), self.charged)
            self.charged = None
        # JAX deletes donated inputs itself where the backend supports donation;
        # deleting here makes the semantics identical on every backend.
        if array is not None and not array.is_deleted():
            array.delete()

    def __repr__(self) -> str:
        state = f"donated in graph {self.donated_in}" if self.donated_in else "live"
        where = "" if self.sharding is None else f", sharding={self.sharding}"
        if self.storage != self.dtype:
            where += f", storage={self.storage}"
        return (f"DeviceData(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}{where}, "
                f"{state}, donate={self.donate}, read_only={self.read_only})")


def donated_error(data: DeviceData) -> DonatedBufferError:
    return DonatedBufferError(
        f"lazyxla: the device buffer of this tensor (shape={list(data.shape)}, dtype={data.dtype}) "
        f"was donated in graph {data.donated_in} and no longer exists. A donated tensor cannot be "
        "read or used again. To keep it usable, do not mark it with lx.set_buffer_donation "
        "(or call lx.set_buffer_donation(t, False) before the sync), or clone it before the sync "
        "that donates it."
    )
