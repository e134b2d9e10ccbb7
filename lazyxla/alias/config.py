"""Run-time donation switches, global and per device.

* aliasing: master switch for all donation (PyTorch/XLA's
  XLA_ENABLE_PARAM_ALIASING, but changeable at run time). Initial value from
  the setting LAZYXLA_ALIASING (lazyxla/config.py; 0 turns it off).
* explicit donation: donate explicitly marked buffers at every sync, not only
  at step barriers (PyTorch/XLA's "alias with buffer donor config").

A per-device setting overrides the global one for that device; setting the
global value (device=None) clears the per-device overrides, so "all devices"
means all devices. Devices are indices here: the public API (lazyxla/donation.py)
turns torch devices into indices, so this layer needs nothing from the frontend.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from .. import config as settings

_aliasing = {None: settings.SETTINGS.aliasing}
_explicit = {None: False}


def _get(table: dict, device: Optional[int]) -> bool:
    return table.get(device, table[None])


def _set(table: dict, enabled: bool, device: Optional[int]) -> None:
    if not isinstance(enabled, bool):
        raise TypeError(f"lazyxla: expected a bool, got {type(enabled).__name__}")
    if device is None:
        table.clear()
        table[None] = enabled
    else:
        table[device] = enabled


def aliasing_enabled(device: Optional[int] = None) -> bool:
    return _get(_aliasing, device)


def set_aliasing(enabled: bool, device: Optional[int] = None) -> None:
    _set(_aliasing, enabled, device)


def explicit_donation_enabled(device: Optional[int] = None) -> bool:
    return _get(_explicit, device)


def set_explicit_donation(enabled: bool, device: Optional[int] = None) -> None:
    _set(_explicit, enabled, device)


@contextlib.contextmanager
def explicit_donation(enabled: bool = True, device: Optional[int] = None) -> Iterator[bool]:
    """Set explicit donation for the body; restores the previous setting, also on errors."""
    previous = explicit_donation_enabled(device)
    saved = dict(_explicit)
    set_explicit_donation(enabled, device)
    try:
        yield previous
    finally:
        _explicit.clear()
        _explicit.update(saved)


