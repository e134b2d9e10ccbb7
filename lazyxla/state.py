"""lazyxla's run-time state: one object, `STATE`, holding every run-time mode and the
little bookkeeping the tracer and the sync layer share.

Modes are what the user switches while a program runs. Each has a public setter in the
module that owns its meaning (they all write here). A mode is changed only through
`STATE.set(mode, value)` or, for a block, `with STATE.scoped(mode=value, ...):`, which
restores the previous values on exit (also on errors); both validate the value and tell
the modules that follow it (`watch`). Hot paths read the fields directly. A mode whose
initial value is a `LAZYXLA_*` setting holds "the setting" until it is set, and its
readers read `config.SETTINGS` then. Per-device tables are replaced, never changed in
place, so a saved value stays what it was. Bookkeeping fields are never scoped, and each
is written by the one module that owns it.

A leaf module: it imports nothing from lazyxla, so every layer may read the state.

Design (the modes, their values and setters; the bookkeeping fields): docs/design.md,
"One run-time state (lazyxla/state.py)".
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

FROM_SETTINGS = "from settings"   # storage_dtypes: LAZYXLA_STORAGE_DTYPES decides
PRECISIONS = ("default", "high", "highest")
FROM_TORCH = "from torch"   # matmul_precision: torch.set_float32_matmul_precision decides


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"lazyxla: the {name} mode expects True or False, got {type(value).__name__} {value!r}")
    return value


def _precision(name: str, value: Any) -> str:
    if value is None or value is FROM_TORCH:   # None: follow torch's switch again
        return FROM_TORCH
    if value not in PRECISIONS:
        raise ValueError(f"lazyxla: matmul precision {value!r} is not one of {', '.join(map(repr, PRECISIONS))} "
                         "(or None: follow torch.set_float32_matmul_precision)")
    return value


def _table(name: str, value: Any) -> dict:
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        raise TypeError(f"lazyxla: {name} expects a {{device: bool}} table, got {value!r}")
    return dict(value)


def _optional_flag(name: str, value: Any):
    return None if value is None else _flag(name, value)


def _any(name: str, value: Any) -> Any:
    return value


# mode -> (checker, initial value)
MODES: dict[str, tuple[Callable[[str, Any], Any], Any]] = {
    "eager": (_flag, False),
    "op_records": (_flag, False),
    "provenance": (_flag, False),
    "matmul_precision": (_precision, FROM_TORCH),
    "storage_dtypes": (_any, FROM_SETTINGS),
    "aliasing": (_table, {}),
    "explicit_donation": (_table, {None: False}),
    "implied_barriers": (_optional_flag, None),
    "host_operands": (_flag, False),
    "spmd_replicated": (_any, None),
    "global_mesh": (_any, None),
}
BOOKKEEPING = {
    "per_op": False, "eager_depth": 0, "traced_since_sync": 0, "sync_epoch": 0, "math_bits_used": False,
    "in_optimizer_step": False, "scaler_step_open": False, "captures": 0, "deferred_barrier": False,
    "size_warning_given": False, "forked_runtime": False, "pending_work": True,
}


class RunState:
    """The run-time modes and bookkeeping of this process (module docstring).

    One object for the process, not per thread: autograd runs the backward pass in its
    own threads, and the pending graph the modes govern is shared by all threads (the
    runtime lock, lazyxla/lock.py, orders them)."""
    __slots__ = tuple(MODES) + tuple(BOOKKEEPING) + ("_watchers",)

    def __init__(self) -> None:
        self._watchers: dict[str, list] = {}
        for name, (_, initial) in MODES.items():
            setattr(self, name, dict(initial) if isinstance(initial, dict) else initial)
        for name, initial in BOOKKEEPING.items():
            setattr(self, name, initial)

    def set(self, name: str, value: Any) -> Any:
        """Set mode `name` (checked) and tell its watchers; returns the previous value."""
        check = MODES.get(name)
        if check is None:
            raise AttributeError(f"lazyxla: {name!r} is not a run-time mode; the modes are {', '.join(MODES)}")
        value = check[0](name, value)
        previous = getattr(self, name)
        setattr(self, name, value)
        if name in ("eager", "op_records"):
            self.per_op = self.eager or self.op_records
        for watcher in self._watchers.get(name, ()):
            watcher(value)
        return previous

    @contextlib.contextmanager
    def scoped(self, **modes: Any) -> Iterator["RunState"]:
        """Set `modes` for the body of a `with`; the previous values come back on exit."""
        saved: list = []
        try:
            for name, value in modes.items():
                saved.append((name, self.set(name, value)))
            yield self
        finally:
            for name, value in reversed(saved):
                self.set(name, value)

    def watch(self, name: str, fn: Callable[[Any], None]) -> None:
        """Call `fn(new value)` whenever mode `name` is set (a module that keeps something
        derived from it: the op dispatcher with provenance, the tensor finalizer with op
        records)."""
        if name not in MODES:
            raise AttributeError(f"lazyxla: {name!r} is not a run-time mode")
        self._watchers.setdefault(name, []).append(fn)

    def modes(self) -> dict:
        """{mode: current value}: what a test or a bug report shows."""
        return {name: getattr(self, name) for name in MODES}


STATE = RunState()
