"""Explicit buffer donation and the donation switches (README.md, "What is supported"; the planner
that decides each donation: docs/design.md, "alias/planner.py")."""
from __future__ import annotations

import weakref
from typing import ContextManager, Optional, Sequence, Union

import torch

from . import metrics
from .alias import switches
from .frontend.device import device_index
from .frontend.storage import live_storages
from .frontend.tensor import LazyTensor
from .ir.node import DATA
from .lock import LOCK


def _lazy(t, what: str) -> LazyTensor:
    if not isinstance(t, LazyTensor):
        kind = f"a {t.device} tensor" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
        raise TypeError(f"lazyxla: {what} expects a lazyxla tensor, got {kind}. Only device buffers "
                        "can be donated: move the tensor with t.to(lx.device()) first.")
    return t


# Identity copies: a pending one of these directly over a buffer is an
# unmaterialised clone, i.e. the same buffer behind another tensor.
_aten = torch.ops.aten
_COPY_OPS = frozenset((_aten.clone.default, _aten.lift_fresh_copy.default, _aten.alias_copy.default,
                       _aten.detach_copy.default, _aten.alias.default))


def _sharers(device: int) -> dict:
    """DeviceData id -> live storages whose value is that buffer: directly, or as a
    pending clone of it that has not been materialised yet.

    Other pending computation that merely reads a buffer (`y = cos(x)`) does not
    share it and does not block marking: the planner never donates a buffer that a
    pending computation outside the graph still needs, and a step barrier computes
    such tensors in the same graph, before the buffer dies (SPEC §4 B.25/26 mark `x`
    while `cos(x)` is pending).
    """
    out: dict = {}
    for st in live_storages(device):
        value = st.value
        if value.op is not DATA and value.op in _COPY_OPS and value.inputs and value.inputs[0].op is DATA:
            value = value.inputs[0]
        if value.op is DATA:
            out.setdefault(id(value.data), []).append(st)
    return out


def _set_one(t: LazyTensor, donate: bool, sharers: dict) -> bool:
    node = t.checked_value()
    if node.op is not DATA:
        return False  # pending computation (or a view that is not the whole buffer)
    data = node.data
    if donate and any(st is not t._st for st in sharers.get(id(data), ())):
        # Another live tensor (not a view of t) holds this buffer, e.g. a copy_ of t
        # or a clone that has not been materialised: donating would invalidate it.
        return False
    if donate and data.external is not None:
        return False   # JAX holds this buffer too (lx.to_jax / lx.from_jax): never donated
    data.donate = donate
    if donate:
        # t is now the only tensor holding the buffer: it becomes the owner, so the
        # planner can tell "the marked tensor still holds it" (fine) from "another
        # tensor got it later, e.g. by copy_" (never donated).
        data.owner = weakref.ref(t._st)
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
            t = _lazy(t, "set_buffer_donation")
            return _set_one(t, donate, _sharers(t._st.device) if donate else {})
        tensors = [_lazy(x, "set_buffer_donation") for x in t]
        sharers: dict = {}
        if donate:  # one scan of the live tensors for the whole batch
            for device in {x._st.device for x in tensors}:
                sharers.update(_sharers(device))
        return [_set_one(x, donate, sharers) for x in tensors]


def get_buffer_donation(t: torch.Tensor) -> bool:
    node = _lazy(t, "get_buffer_donation").lazy_value()
    return bool(node.op is DATA and node.data.donate)


def is_donated(t: torch.Tensor) -> bool:
    """True iff the buffer behind `t` was donated to a computation and no longer exists."""
    t = _lazy(t, "is_donated")
    node = t._st.value
    return bool(node.op is DATA and node.data.donated_in is not None)


# The switches (alias/switches.py keeps them in the run-time state, per device index;
# devices are named here as the public API takes them: torch.device, "lazyxla:1", an
# index, or None = all).
def _device_index(device: Union[torch.device, str, int, None]) -> Optional[int]:
    return device if device is None or isinstance(device, int) else device_index(device)


def aliasing_enabled(device=None) -> bool:
    return switches.aliasing_enabled(_device_index(device))


def set_aliasing(enabled: bool, device=None) -> None:
    switches.set_aliasing(enabled, _device_index(device))


def explicit_donation_enabled(device=None) -> bool:
    return switches.explicit_donation_enabled(_device_index(device))


def set_explicit_donation(enabled: bool, device=None) -> None:
    switches.set_explicit_donation(enabled, _device_index(device))


def explicit_donation(enabled: bool = True, device=None) -> ContextManager[bool]:
    """Sets explicit donation for the body; restores the previous setting, also on errors."""
    return switches.explicit_donation(enabled, _device_index(device))
