"""Run-time donation switches, for all devices and per device.

* aliasing: master switch for all donation (PyTorch/XLA's
  XLA_ENABLE_PARAM_ALIASING, but changeable at run time). Until it is set, the
  setting LAZYXLA_ALIASING (lazyxla/config.py; 0 turns it off) decides, read at use.
* explicit donation: donate explicitly marked buffers at every sync, not only
  at step barriers (PyTorch/XLA's "alias with buffer donor config").

Both are modes of the run-time state (lazyxla/state.py): a table {device index or
None: bool}. A per-device setting overrides the all-devices one for that device;
setting the all-devices value (device=None) clears the per-device overrides, so
"all devices" means all devices. Devices are indices here: the public API
(lazyxla/donation.py) turns torch devices into indices, so this layer needs
nothing from the frontend.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from .. import config
from ..state import STATE


def _get(table: dict, device: Optional[int]):
    return table.get(device, table.get(None))


def _set(mode: str, enabled: bool, device: Optional[int]) -> None:
    if not isinstance(enabled, bool):
        raise TypeError(f"lazyxla: expected a bool, got {type(enabled).__name__}")
    if device is None:
        table = {None: enabled}
    else:
        table = dict(getattr(STATE, mode))
        table[device] = enabled
    STATE.set(mode, table)


def aliasing_enabled(device: Optional[int] = None) -> bool:
    enabled = _get(STATE.aliasing, device)
    return config.SETTINGS.aliasing if enabled is None else enabled


def set_aliasing(enabled: bool, device: Optional[int] = None) -> None:
    _set("aliasing", enabled, device)


def explicit_donation_enabled(device: Optional[int] = None) -> bool:
    return _get(STATE.explicit_donation, device)


def set_explicit_donation(enabled: bool, device: Optional[int] = None) -> None:
    _set("explicit_donation", enabled, device)


@contextlib.contextmanager
def explicit_donation(enabled: bool = True, device: Optional[int] = None) -> Iterator[bool]:
    """Set explicit donation for the body; restores the previous setting, also on errors."""
    previous = explicit_donation_enabled(device)
    saved = STATE.explicit_donation
    set_explicit_donation(enabled, device)
    try:
        yield previous
    finally:
        STATE.set("explicit_donation", saved)
