"""Step closures (`xm.add_step_closure`): callables run after the next step barrier
of this layer (`torch_xla.sync`, `xm.mark_step`, `xm.optimizer_step(barrier=True)`).

A compat-only helper: lazyxla has no step-closure API, and upstream runs them at the
same points. A `lx.sync()` called directly does not run them."""
from __future__ import annotations

from typing import Any, Callable

_pending: list = []


def add(closure: Callable[..., Any], args: tuple = ()) -> None:
    _pending.append((closure, tuple(args)))


def run() -> None:
    """In registration order; closures added by a closure run at the next barrier."""
    todo = list(_pending)
    _pending.clear()
    for closure, args in todo:
        closure(*args)
