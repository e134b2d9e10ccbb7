"""Explicit buffer donation (API.md "Buffer donation and aliasing")."""
from __future__ import annotations

from typing import Sequence, Union

import torch

from . import metrics
from .frontend.storage import live_storages
from .frontend.tensor import LazyTensor
from .ir.node import DATA
from .sync.api import LOCK
from .sync.collect import data_reachable


def _lazy(t, what: str) -> LazyTensor:
    if not isinstance(t, LazyTensor):
        kind = f"a {t.device} tensor" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
        raise TypeError(f"lazyxla: {what} expects a lazyxla tensor, got {kind}. Only device buffers "
                        "can be donated: move the tensor with t.to(lx.device()) first.")
    return t


def _other_holders(device: int, exclude) -> dict:
    """DeviceData id -> number of live storages other than `exclude` that need it."""
    counts: dict = {}
    pending = []
    for st in live_storages(device):
        if st is exclude:
            continue
        value = st.value
        if value.op is DATA:
            counts[id(value.data)] = counts.get(id(value.data), 0) + 1
        else:
            pending.append(value)
    for did in data_reachable(pending):
        counts[did] = counts.get(did, 0) + 1
    return counts


def _set_one(t: LazyTensor, donate: bool) -> bool:
    node = t.checked_value()
    if node.op is not DATA:
        return False  # pending computation (or a view that is not the whole buffer)
    data = node.data
    if donate and _other_holders(t._st.device, t._st).get(id(data)):
        # Another live tensor (not a view of t) still needs this buffer, e.g. a clone
        # that has not been materialised: donating would invalidate it.
        return False
    data.donate = donate
    metrics.counter_add("XlaSetBufferDonation")
    return True


def set_buffer_donation(t: Union[torch.Tensor, Sequence[torch.Tensor]], donate: bool = True):
    """Mark (or unmark) the device buffer behind `t` for donation.

    Returns True if `t` holds device data (flag changed), False if it holds
    pending computation or its buffer is shared with another live tensor.
    Given a sequence of tensors, returns a list of bools (the batch call).
    """
    with LOCK:
        if isinstance(t, torch.Tensor):
            return _set_one(_lazy(t, "set_buffer_donation"), donate)
        tensors = [_lazy(x, "set_buffer_donation") for x in t]
        return [_set_one(x, donate) for x in tensors]


def get_buffer_donation(t: torch.Tensor) -> bool:
    node = _lazy(t, "get_buffer_donation").lazy_value()
    return bool(node.op is DATA and node.data.donate)


def is_donated(t: torch.Tensor) -> bool:
    """True iff the buffer behind `t` was donated to a computation and no longer exists."""
    t = _lazy(t, "is_donated")
    node = t._st.value
    return bool(node.op is DATA and node.data.donated_in is not None)
