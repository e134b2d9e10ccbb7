"""Installing a graph's outputs: each becomes a fresh, unflagged device-data handle owned by
the storage it is written into (the one way results reach tensors; runtime/execute.py only
runs the graph)."""
from __future__ import annotations

import time
from typing import Sequence

from .. import metrics
from .._jax import torch_dtype
from ..state import STATE
from ..ir.graph import Graph
from ..ir.build import data_node
from ..runtime import memory, placement
from ..runtime.device_data import DeviceData


def install(graph: Graph, targets: list, outs: tuple) -> None:
    """Write output `slot` of `outs` into each `(storage, slot)` of `targets`; storages
    given one slot share one handle."""
    install_outputs(output_avals(graph), graph.device, targets, outs)


def output_avals(graph: Graph) -> list:
    """Per output slot of `graph`, its logical `(shape, dtype)`."""
    order = graph.order
    return [(order[p].shape, order[p].dtype) for p in graph.outputs]


def install_outputs(avals: Sequence[tuple], device: int, targets: list, outs: tuple) -> None:
    """`install` from its parts: per output slot its logical `(shape, dtype)` (a captured
    step keeps them, sync/step_capture.py), the device, the targets, the arrays. Timed as
    `WrapXlaData` with lx.metrics' detailed records on (`set_op_records`)."""
    detailed = STATE.op_records
    if detailed:
        start = time.perf_counter_ns()
    installed: list = [None] * len(outs)
    spmd = placement.spmd_enabled()
    made: list = []   # charged together (memory.charge_outputs), also if a write raises
    try:
        for st, slot in targets:
            data = installed[slot]
            if data is None:
                shape, dtype = avals[slot]
                out = outs[slot]
                # the array's own dtype is the storage: narrower than the node's dtype under a
                # storage dtype policy (runtime/storage_dtypes.py)
                data = installed[slot] = DeviceData(out, shape, dtype, device, owner=st,
                                                    sharding=out.sharding if spmd else None,
                                                    stored_dtype=torch_dtype(out.dtype), charge=spmd)
                made.append(data)
            st.write(data_node(data))
    finally:
        if not spmd:
            memory.charge_outputs(made, device)
    if detailed:
        metrics.metric_add("WrapXlaData", time.perf_counter_ns() - start)
