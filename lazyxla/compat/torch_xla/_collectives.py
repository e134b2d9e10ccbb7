"""The collectives of `torch_xla.core.xla_model` between processes.

lazyxla runs one replica per process (runtime.py): with one process, or in SPMD mode,
there is nothing to exchange and xla_model answers itself, with upstream's results for
one replica. With several processes (`torch_xla.launch` / `xmp.spawn`, which join them
in a gloo `torch.distributed` group), the values travel through that group as host
copies: every input is read by one graph (`lx.utils.to_cpu`, nothing donated), reduced
or gathered by gloo, and written back to the device. Upstream puts the collective into
the XLA graph instead; lazyxla has no cross-process collective inside a graph outside
SPMD, so each call here is a host round trip (a step's graph ends before it).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

import lazyxla as lx

from ..unsupported import refuse
from . import runtime as xr

# xm.REDUCE_* (upstream's strings) -> torch.distributed's reduce ops.
_OPS = {"sum": "SUM", "mul": "PRODUCT", "min": "MIN", "max": "MAX", "and": "BAND", "or": "BOR"}


def check_reduce_type(reduce_type: str) -> None:
    if reduce_type not in _OPS:
        raise ValueError(f"torch_xla.core.xla_model: unknown reduce type {reduce_type!r}; one of "
                         f"{', '.join(sorted(_OPS))} (xm.REDUCE_SUM, ...)")


def group(what: str, groups: Optional[Sequence[Sequence[int]]]):
    """torch.distributed, checked to span every process; `groups` must be all of them in
    one group (replica subgroups are not mapped)."""
    import torch.distributed as dist
    world = xr.world_size()
    if groups and [sorted(g) for g in groups] != [list(range(world))]:
        refuse(f"{what}(groups={list(map(list, groups))}) with {world} processes (replica subgroups)",
               "Pass groups=None: one group of all processes")
    if not dist.is_initialized():
        refuse(f"{what} between processes without torch.distributed",
               "start the processes with torch_xla.launch or xmp.spawn, which initialise it")
    return dist


def _write_back(tensors: Sequence[torch.Tensor], hosts: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for t, h in zip(tensors, hosts):
            t.copy_(h)


def all_reduce_(reduce_type: str, tensors: List[torch.Tensor], scale: float, groups) -> None:
    """In place: each tensor becomes the reduction over the processes, times `scale`."""
    dist = group("torch_xla.core.xla_model.all_reduce", groups)
    op = getattr(dist.ReduceOp, _OPS[reduce_type])
    hosts = lx.utils.to_cpu(list(tensors))
    for h in hosts:
        dist.all_reduce(h, op=op)
        if scale != 1.0:
            h.mul_(scale)
    _write_back(tensors, hosts)


def all_gather(value: torch.Tensor, dim: int, groups) -> torch.Tensor:
    """The values of all processes concatenated along `dim`, in ordinal order, on
    `value`'s device."""
    dist = group("torch_xla.core.xla_model.all_gather", groups)
    host = lx.utils.to_cpu(value).contiguous()
    parts = [torch.empty_like(host) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, host)
    return torch.cat(parts, dim=dim).to(value.device)


def broadcast_(tensors: Sequence[torch.Tensor], root_ordinal: int, groups) -> None:
    """In place: every process's tensors take the values of process `root_ordinal`'s."""
    dist = group("torch_xla.core.xla_model.collective_broadcast", groups)
    hosts = lx.utils.to_cpu(list(tensors))
    for h in hosts:
        dist.broadcast(h, src=root_ordinal)
    _write_back(tensors, hosts)


def gather_objects(what: str, obj) -> list:
    """`obj` (picklable host data) of every process, in ordinal order."""
    dist = group(what, None)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered
