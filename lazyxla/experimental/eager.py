"""Eager mode: every op runs on the device as it is called, as PyTorch/XLA's
`torch_xla.experimental.eager_mode`.

With eager mode on, each op called from user code (an ATen op reaching lazyxla's
dispatcher, and the device's `empty` factory) is traced and run at once as a one-op
graph, compiled the first time its graph key is seen; its results hold device data when
the call returns, so `lx.sync()` finds nothing to do for them. Ops that a handler or a
decomposition issues join the graph of the op that issued them. Donation works as at a
partial sync (`lx.sync_tensors`); using a donated tensor raises `lx.DonatedBufferError`
at the op. Eager ops' graphs are timed as `EagerOpCompileTime` / `EagerOpExecuteTime`,
never as `CompileTime` / `ExecuteTime`. Functions compiled with
`torch.compile(backend="lazyxla")` are not covered: their results stay pending.

Design: docs/design.md, "experimental/eager.py".
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ..state import STATE


def eager_mode(enabled: bool) -> None:
    """Turn eager mode on or off for this process (see the module docstring). Work traced
    while it was off stays pending until a sync or until an eager op uses it."""
    STATE.set("eager", enabled)   # checked there: True or False


def is_eager_mode() -> bool:
    return STATE.eager


@contextlib.contextmanager
def eager_mode_context(enabled: bool) -> Iterator[None]:
    """Eager mode on or off inside the `with` block; the previous setting afterwards."""
    with STATE.scoped(eager=enabled):
        yield
