"""`lx.optimization_barrier_`: a barrier node written into lazy tensors in place (lowered by
lower/barrier.py). Here, below lazyxla/utils.py and lazyxla/recompute.py, which both use it."""
from __future__ import annotations

from typing import Sequence

import torch

from ..ir.build import getitem_node, op_node
from ..ir.node import OPT_BARRIER
from ..lock import LOCK
from .tensor import LazyTensor


def optimization_barrier_(tensors: Sequence[torch.Tensor]) -> None:
    """In place: XLA may not fuse computation across this point for `tensors`.

    Each tensor is updated in place with the barrier's output, so automatic
    aliasing still donates their old buffers at the next step barrier."""
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, LazyTensor):
            raise TypeError("lazyxla: optimization_barrier_ expects lazyxla tensors")
    if not tensors:
        return
    with LOCK:  # reads and rewrites storages, like a traced op (lazyxla/lock.py)
        values = tuple(t.checked_value() for t in tensors)
        shapes = tuple(v.shape for v in values)
        dtypes = tuple(v.dtype for v in values)
        node = op_node(OPT_BARRIER, values, None, shapes, dtypes, len(values))
        for i, t in enumerate(tensors):
            t.write(getitem_node(node, i))
