"""`lx.debug.memory_report()`: what holds device memory, by role and by buffer.

The runtime's ledger (runtime/memory.py) sums the live buffers but neither lists them
nor knows what a buffer is for. Both are found when the report is made, by one walk
over the objects the garbage collector tracks: the live handles (`DeviceData` still
charged), and their roles: lazy tensors that are `nn.Parameter`s are
parameters, their `.grad` tensors gradients, and the tensors in the `state` of
live `torch.optim.Optimizer`s optimizer state; any other buffer is "other". A
buffer is attributed once, in that order of precedence (a view shares its base's
buffer). Nothing is registered on the hot path, so the report costs one walk
(tens of ms for a large program) and only when asked for, or when a graph does
not fit in device memory (its text is then part of the error).
"""
from __future__ import annotations

from typing import Optional

import torch

from .frontend.device_module import memory_device
from .frontend.tensor import LazyTensor
from .ir.node import DATA
from .runtime import collector, memory
from .runtime.device_data import DeviceData
from .sync.pipeline import LastGraph

ROLES = ("parameters", "gradients", "optimizer state", "other")


def _roles() -> tuple[dict, list]:
    """(id(DeviceData) -> role, for the buffers that live lazy tensors hold; the live
    handles)."""
    params, optimizers, handles = [], [], []
    for obj in collector.every_object():   # frozen objects too (runtime/collector.py)
        cls = type(obj)   # not isinstance: some objects warn when asked for __class__
        if cls is DeviceData:
            if obj.charged is not None:
                handles.append(obj)
        elif issubclass(cls, LazyTensor):
            if isinstance(obj, torch.nn.Parameter):
                params.append(obj)
        elif issubclass(cls, torch.optim.Optimizer):
            optimizers.append(obj)
    roles: dict = {}

    def mark(t, role: str) -> None:
        if isinstance(t, LazyTensor) and t._st.value.op is DATA:
            roles.setdefault(id(t._st.value.data), role)

    for p in params:
        mark(p, "parameters")
    for p in params:
        mark(p.grad, "gradients")
    for opt in optimizers:
        for state in opt.state.values():
            for v in state.values():
                mark(v, "optimizer state")
    return roles, handles


class MemoryReport:
    """Live device buffers of one device by role, the largest ones, and the memory
    analysis of the last graph that ran."""

    def __init__(self, device: int, top: int) -> None:
        roles, handles = _roles()
        buffers = [data for data in handles if any(d == device for d, _ in data.charged)]
        self.device = device
        self.bytes_used = memory.allocated(device)
        self.peak_bytes_used = memory.peak(device)
        self.bytes_limit = memory.bytes_limit(device)
        # the chip's own allocator (TPU, GPU): what it holds, lazyxla's tensors and the rest
        self.device_stats = memory.backend_stats(device)
        self.by_role = {r: {"bytes": 0, "buffers": 0} for r in ROLES}
        rows = []
        for data in buffers:
            n = sum(b for d, b in data.charged or () if d == device)
            role = roles.get(id(data), "other")
            self.by_role[role]["bytes"] += n
            self.by_role[role]["buffers"] += 1
            rows.append({"shape": list(data.shape), "dtype": data.dtype, "bytes": n, "role": role})
        rows.sort(key=lambda r: -r["bytes"])
        self.largest = rows[:top]
        exe = LastGraph.executable
        self.last_graph: Optional[dict] = None
        if exe is not None:
            self.last_graph = {"key": exe.key_hex, "kind": LastGraph.kind, "nodes": LastGraph.n_nodes,
                               **exe.memory_analysis()}

    def __str__(self) -> str:
        n_buffers = sum(r["buffers"] for r in self.by_role.values())
        lines = [f"lazyxla device memory, device {self.device}: {_mb(self.bytes_used)} in {n_buffers} live "
                 f"buffers, peak {_mb(self.peak_bytes_used)}, limit {_mb(self.bytes_limit)}",
                 "  by role: " + ", ".join(f"{role} {_mb(r['bytes'])} ({r['buffers']})"
                                           for role, r in self.by_role.items())]
        stats = self.device_stats
        if stats:
            lines.append(f"  the device's allocator: {_mb(stats.get('bytes_in_use', 0))} in use, peak "
                         f"{_mb(stats.get('peak_bytes_in_use', 0))}, limit {_mb(stats.get('bytes_limit', 0))}")
        if self.largest:
            lines.append(f"  largest {len(self.largest)} buffers:")
            lines += [f"    {_mb(r['bytes']):>12}  {str(r['shape']):<20} {str(r['dtype']):<15} {r['role']}"
                      for r in self.largest]
        g = self.last_graph
        if g is None:
            lines.append("  last graph: none has run yet")
        elif "argument_size_in_bytes" in g:
            lines.append(f"  last graph {g['key']} ({g['kind']}, {g['nodes']} nodes): arguments "
                         f"{_mb(g['argument_size_in_bytes'])}, outputs {_mb(g['output_size_in_bytes'])}, "
                         f"temporaries {_mb(g['temp_size_in_bytes'])}, aliased {_mb(g['alias_size_in_bytes'])}")
        else:
            lines.append(f"  last graph {g['key']} ({g['kind']}): the backend gave no memory analysis")
        return "\n".join(lines)

    __repr__ = __str__


def _mb(n: int) -> str:
    return f"{n / 2**20:,.2f} MB"


def memory_report(device=None, top: int = 20) -> MemoryReport:
    """Live device buffers of `device` (default 0) by role (parameters, gradients,
    optimizer state, other), the `top` largest with shape, dtype and bytes, and the last
    graph's arguments, outputs, temporaries and aliased bytes. `str()` gives the text."""
    if not isinstance(top, int) or top < 0:
        raise ValueError(f"lazyxla: memory_report(top=...) takes a count >= 0, got {top!r}")
    return MemoryReport(memory_device(device), top)


# import-time seam: runtime/memory.py, layers below, puts this report in its out-of-memory errors
memory.set_reporter(lambda device: str(memory_report(device)))
