"""lx.save, lx.optimization_barrier_ and lx.utils.checkpoint."""
from __future__ import annotations

from typing import Sequence

import torch

from .frontend.tensor import LazyTensor, lazy_tensors_in
from .ir.node import OPT_BARRIER, Node, getitem_node, intern_sig
from .lock import LOCK
from .sync.api import host_values


def save(obj, path, **kwargs) -> None:
    """`torch.save(obj)` with every lazyxla tensor moved to the CPU first.

    Reads values only: never donates or invalidates a buffer (explicit donors
    included, whatever the explicit-donation setting)."""
    lazies = lazy_tensors_in(obj, [])
    hosts = dict(zip(map(id, lazies), host_values(lazies, allow_explicit=False)))

    def move(o):
        if isinstance(o, LazyTensor):
            h = hosts[id(o)]
            return torch.nn.Parameter(h, o.requires_grad) if isinstance(o, torch.nn.Parameter) else h
        if isinstance(o, dict):
            return type(o)((k, move(v)) for k, v in o.items())
        if isinstance(o, (list, tuple)):
            return type(o)(move(v) for v in o)
        return o

    torch.save(move(obj), path, **kwargs)


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
        node = Node(OPT_BARRIER, values, None, values, shapes, dtypes,
                    intern_sig((OPT_BARRIER, shapes, dtypes)), None, len(values))
        for i, t in enumerate(tensors):
            t.write(getitem_node(node, i))




def checkpoint(function, *args, use_reentrant: bool = True, **kwargs):
    """PyTorch/XLA's `torch_xla.utils.checkpoint`: `torch.utils.checkpoint.checkpoint`
    (reentrant by default, as there) with the backward's re-run kept apart from the forward,
    so the region's activations are not kept (lazyxla/recompute.py)."""
    from .recompute import checkpoint as lazyxla_checkpoint  # recompute imports this module
    return lazyxla_checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)
