"""Eager mode: every op runs on the device as it is called, as PyTorch/XLA's
`torch_xla.experimental.eager_mode`.

With eager mode on, each op called from user code (an ATen op reaching lazyxla's
dispatcher, and the device's `empty` factory) is traced as usual and then run at once:
its one-op graph is compiled the first time its graph key is seen (op, shapes, dtypes,
donors; scalar values are operands, so `x + 1` and `x + 2` share one executable) and
run, and its results hold device data when the call returns. `lx.sync()` then finds
nothing to do for those tensors. Ops that a handler or a decomposition issues join the
graph of the op that issued them. Donation works as at a partial sync
(`lx.sync_tensors`): a buffer no other live tensor needs may be reused by an in-place
op, marked buffers only with explicit donation enabled; using a donated tensor raises
`lx.DonatedBufferError` at the op, as in lazy mode.

Metrics: the graphs of eager ops are timed as `EagerOpCompileTime` and
`EagerOpExecuteTime` (PyTorch/XLA's names), never as `CompileTime` / `ExecuteTime`;
`CachedCompile` / `UncachedCompile` count them as any graph.

The cost: one graph launch per op. Lazy mode pays one extra flag test per op for this
switch, shared with lx.metrics' op records (frontend/dispatch.py).

Not covered: functions compiled with `torch.compile(backend="lazyxla")` replay their
captured graph without dispatching its ops; their results stay pending until a sync.
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
