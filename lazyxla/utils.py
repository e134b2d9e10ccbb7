"""lx.save, lx.optimization_barrier_, lx.utils.checkpoint, and the tensor-tree helpers
lx.utils.map_tensors / lx.utils.to_cpu."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .data.batches import map_leaves
from .frontend.barrier import optimization_barrier_  # noqa: F401  (lx.optimization_barrier_)
from .frontend.tensor import LazyTensor, lazy_tensors_in
from .recompute import checkpoint as _lazyxla_checkpoint
from .sync.api import host_values


def map_tensors(obj: Any, select: Callable[[torch.Tensor], bool], fn: Callable[[torch.Tensor], Any]) -> Any:
    """`obj` with every tensor `t` for which `select(t)` holds replaced by `fn(t)`, inside
    nested mappings, lists, tuples and named tuples (their types and extra state kept, a
    tensor met twice mapped once: lazyxla/data/batches.py); other objects as they are."""
    return map_leaves(obj, lambda t, _key: fn(t), lambda x: isinstance(x, torch.Tensor) and select(x))


def to_cpu(obj: Any) -> Any:
    """`obj` with every lazyxla tensor in it replaced by its CPU copy (a Parameter by a
    CPU Parameter), all read by one graph per device. Reads values only: never donates
    or invalidates a buffer (explicit donors included, whatever the explicit-donation
    setting)."""
    lazies = lazy_tensors_in(obj, [])
    hosts = dict(zip(map(id, lazies), host_values(lazies, allow_explicit=False)))

    def move(t: torch.Tensor) -> torch.Tensor:
        h = hosts[id(t)]
        return torch.nn.Parameter(h, t.requires_grad) if isinstance(t, torch.nn.Parameter) else h

    return map_tensors(obj, lambda t: isinstance(t, LazyTensor), move)


def save(obj, path, **kwargs) -> None:
    """`torch.save(obj)` with every lazyxla tensor moved to the CPU first (`to_cpu`):
    never donates or invalidates a buffer."""
    torch.save(to_cpu(obj), path, **kwargs)


def checkpoint(function, *args, use_reentrant: bool = True, **kwargs):
    """PyTorch/XLA's `torch_xla.utils.checkpoint`: `torch.utils.checkpoint.checkpoint`
    (reentrant by default, as there) with the backward's re-run kept apart from the forward,
    so the region's activations are not kept (lazyxla/recompute.py)."""
    return _lazyxla_checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)
