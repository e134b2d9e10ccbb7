"""Installing a graph's outputs: each becomes a fresh, unflagged device-data handle owned by
the storage it is written into (the one way results reach tensors; runtime/execute.py only
runs the graph).

What an output's handle needs besides its array (logical shape and dtype, the array's own
dtype, its ledger charge, its DATA node's signature) depends only on the executable, whose
key fixes its outputs: it is worked out once per executable, at its first install (its
`outputs` plan, counted `OutputPlanBuilt`), and every later install of the lazy step's
graph or a replayed captured step (sync/step_capture.py) reads one tuple.

Design: docs/design.md, "Lazy mode's per-op path and overlap (issue 50)".
"""
from __future__ import annotations

import time
from typing import NamedTuple

from .. import metrics
from .._jax import torch_dtype
from ..compile.cache import Executable
from ..state import STATE
from ..ir.graph import Graph, byte_size
from ..ir.build import data_node, data_sig
from ..runtime import memory, placement
from ..runtime.device_data import DeviceData


class OutputSlot(NamedTuple):
    """What an output slot's handle is made of, the same at every run of one executable."""
    shape: tuple
    dtype: object          # logical torch dtype (the node's)
    stored_dtype: object   # the array's own: narrower under a storage dtype policy (runtime/storage_dtypes.py)
    charged: tuple         # its ledger charge on one device, ((device, bytes),) (runtime/memory.py)
    sig: int               # its DATA node's signature (ir/build.py `data_sig`)


def install(graph: Graph, targets: list, outs: tuple, exe: Executable) -> None:
    """Write output `slot` of `outs` into each `(storage, slot)` of `targets`; storages
    given one slot share one handle."""
    install_outputs(output_plan(exe, graph, outs), graph.device, targets, outs)


def output_plan(exe: Executable, graph: Graph, outs: tuple) -> tuple:
    """`exe`'s outputs plan (module docstring), made from `graph` and its arrays `outs` at
    its first install."""
    plan = exe.outputs
    if plan is None:
        metrics.counter_add("OutputPlanBuilt")
        order, device = graph.order, graph.device
        plan = exe.outputs = tuple(_slot(order[p].shape, order[p].dtype, torch_dtype(out.dtype), device)
                                   for p, out in zip(graph.outputs, outs))
    return plan


def _install_sharded(plan: tuple, device: int, targets: list, outs: tuple) -> None:
    """`install_outputs` in SPMD mode: each array's sharding decides its charge per device,
    which each handle makes itself."""
    installed: list = [None] * len(outs)
    for st, slot in targets:
        data = installed[slot]
        if data is None:
            out = outs[slot]
            data = installed[slot] = DeviceData(out, plan[slot].shape, plan[slot].dtype, device, owner=st,
                                                sharding=out.sharding, stored_dtype=plan[slot].stored_dtype)
        st.write(data_node(data, plan[slot].sig))


def _slot(shape: tuple, dtype, stored_dtype, device: int) -> OutputSlot:
    return OutputSlot(shape, dtype, stored_dtype, ((device, byte_size(shape, stored_dtype)),),
                      data_sig(shape, dtype, stored_dtype))


def install_outputs(plan: tuple, device: int, targets: list, outs: tuple) -> None:
    """`install` from its parts: the executable's outputs plan, the device, the targets,
    the arrays. Timed as `WrapXlaData` with lx.metrics' detailed records on
    (`set_op_records`)."""
    detailed = STATE.op_records
    if detailed:
        start = time.perf_counter_ns()
    if placement.spmd_enabled():
        _install_sharded(plan, device, targets, outs)
    else:
        installed: list = [None] * len(outs)
        made = nbytes = 0   # charged together (memory.charge_outputs), also if a write raises
        try:
            for st, slot in targets:
                data = installed[slot]
                shape, dtype, stored_dtype, charged, sig = plan[slot]
                if data is None:
                    # positional: a call with keywords costs more, and a step installs hundreds
                    data = installed[slot] = DeviceData(outs[slot], shape, dtype, device, st, False, None, None,
                                                        stored_dtype, None, False, charged)
                    made += 1
                    nbytes += charged[0][1]
                st.write(data_node(data, sig))
        finally:
            memory.charge_outputs(nbytes, made, device)
    if detailed:
        metrics.metric_add("WrapXlaData", time.perf_counter_ns() - start)
