"""Exceptions users can catch, and the one lazyxla's layers hand each other when a graph fails."""
from __future__ import annotations

from typing import Optional


class DonatedBufferError(RuntimeError):
    """A tensor whose device buffer was donated to a compiled graph was used again."""


class StorageRangeError(OverflowError):
    """A value does not fit the narrower type its dtype is held in under the storage dtype
    policy (the TPU's default holds int64 in int32): refused, never wrapped."""


class LoweringError(RuntimeError):
    """An op could not be lowered to JAX, or the lowered graph failed to compile."""

    # Position in the graph's topological order of the node whose lowering failed, set by
    # compile/program.py; None when the failure is not one node's lowering (an XLA compile
    # error): then sync/failures.py searches for the op.
    node_position = None


class ExecutionFailure(RuntimeError):
    """A sync's graph failed at one stage: "lower" (an op's lowering, at `node_position` of
    the graph's order), "compile" (XLA refused the graph) or "run" (the executable's call
    raised; `lost_buffers` donated inputs the backend consumed before failing). `error` is
    the original exception, also the `__cause__`. The runtime and the sync's compile stage
    raise it, sync/failures.py reads it; users see what it becomes there: the contained
    `FailedOpError`, or for running out of memory a `torch.OutOfMemoryError`."""
    LOWER, COMPILE, RUN = "lower", "compile", "run"

    def __init__(self, stage: str, error: BaseException, lost_buffers: int = 0,
                 node_position: Optional[int] = None) -> None:
        super().__init__(f"lazyxla: the graph failed to {stage}: {type(error).__name__}: {error}")
        self.stage = stage
        self.error = error
        self.lost_buffers = lost_buffers
        self.node_position = node_position


class FailedOpError(LoweringError):
    """An op failed to lower, compile or run. Raised once by the sync whose graph held it, then
    by every read or use of a tensor whose value needed it (the tensor carries the error
    instead of a value until it is given a new one). A LoweringError, so code that caught
    lowering failures still catches it (docs/reliability.md, "Failures stay contained")."""


class IndexRangeError(IndexError, RuntimeError):
    """A dimension or index out of range, or a reduction without an identity (max, min)
    over a dimension of size 0, found when an op is recorded: an IndexError, as eager
    PyTorch raises these, and a RuntimeError, as PyTorch/XLA raises them."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be saved (nothing was committed, the earlier checkpoints are
    intact) or a committed checkpoint is damaged; the message names the file."""


class ForkedRuntimeError(RuntimeError):
    """lazyxla's device runtime was used in a process forked from one where it had started
    (a DataLoader worker): JAX cannot run there (docs/reliability.md, "Concurrency")."""
