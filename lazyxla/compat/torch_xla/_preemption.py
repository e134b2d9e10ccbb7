"""Preemption notices (`torch_xla._XLAC._activate_preemption_sync_manager`,
`_sync_point_reached`, CheckpointManager's `chkpt_on_preemption`): a SIGTERM handler
that records the notice. lazyxla has no counterpart; upstream's manager also agrees on
the step across hosts through its coordinator, which this one-process handler does not:
each process reports its own notice."""
from __future__ import annotations

import signal
import threading
from typing import Optional

_received = threading.Event()
_previous: Optional[object] = None
_active = False


def _on_sigterm(signum, frame) -> None:
    _received.set()


def activate() -> None:
    """Install the handler (main thread only, as Python's signal module requires)."""
    global _previous, _active
    if _active or threading.current_thread() is not threading.main_thread():
        return
    _previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _active = True


def deactivate() -> None:
    global _previous, _active
    if _active:
        signal.signal(signal.SIGTERM, _previous if _previous is not None else signal.SIG_DFL)
        _active, _previous = False, None
        _received.clear()


def sync_point_reached(step: int) -> bool:
    """True once a SIGTERM arrived since activation."""
    return _active and _received.is_set()
