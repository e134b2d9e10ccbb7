"""Lifted scalars as a graph's operands: how they travel and how they are packed.

Lifted scalars travel as float64, int64, bool or complex128 by their Python kind and are
cast to the node's dtype inside; where the graph's storage policy narrows a kind (the TPU
holds 64-bit types in 32 bits), that kind travels in 32 bits. They come packed in one vector per kind present
(`Graph.packed_scalars`) where the backend says so (on accelerators every operand from the
host is a transfer of its own) and in a long chain: more than SEPARATE_SCALARS_MAX scalars
that also outnumber the graph's outputs PACK_SCALARS_PER_OUTPUT to one. Otherwise each is a
0-d parameter of its own.

This is a fact about the graph, read by compile/program.py (which builds the program's
parameters) and runtime/execute.py (which passes the values), so it sits in ir/, below both.

Design: docs/design.md, "Scalars" and "ir/scalars.py".
"""
from __future__ import annotations

from typing import Union

import numpy as np
import torch

from ..errors import StorageRangeError
from .graph import Graph
from .node import Node

SCALAR_DTYPES = (np.float64, np.int64, np.bool_, np.complex128)
_SCALAR_TYPES = (float, int, bool, complex)
_KIND_DTYPES = (torch.float64, torch.int64, torch.bool, torch.complex128)
# what a narrowed kind travels in: 32 bits (a float64 held in 16 bits still travels as float32)
NARROWED_TRAVEL = {torch.float32: np.float32, torch.bfloat16: np.float32, torch.float16: np.float32,
                   torch.int32: np.int32, torch.uint32: np.uint32, torch.complex64: np.complex64}
SEPARATE_SCALARS_MAX = 256
PACK_SCALARS_PER_OUTPUT = 4


def scalar_kind(node: Node) -> int:
    """0: travels as float64, 1: as int64, 2: as bool, 3: as complex128."""
    if node.dtype.is_floating_point:
        return 0
    if node.dtype.is_complex:
        return 3
    return 2 if node.dtype == torch.bool else 1


def long_chain(n_scalars: int, n_outputs: int) -> bool:
    """A graph whose scalars are too many to pass apart: packed, and merged by value at a
    sync (sync/collect.py)."""
    return n_scalars > SEPARATE_SCALARS_MAX and n_scalars > PACK_SCALARS_PER_OUTPUT * n_outputs


def _pack_layout(graph: Graph) -> tuple[list, list]:
    """Packed scalars: (operand offset, element) of each scalar, and (kind, length) of each
    pack, in kind order, kinds without scalars left out."""
    counts = [0] * len(SCALAR_DTYPES)
    elements = []
    for s in graph.scalars:
        k = scalar_kind(s)
        elements.append((k, counts[k]))
        counts[k] += 1
    packs = [(k, n) for k, n in enumerate(counts) if n]
    offset = {k: i for i, (k, _) in enumerate(packs)}
    return [(offset[k], j) for k, j in elements], packs


def scalar_slots(graph: Graph, n_params: int) -> dict:
    """id(scalar node) -> (operand position, element of the pack or None), for every
    scalar node of the graph (merged ones share their operand)."""
    if not graph.packed_scalars:
        slots = {id(s): (n_params + i, None) for i, s in enumerate(graph.scalars)}
    else:
        layout, _ = _pack_layout(graph)
        slots = {id(s): (n_params + k, j) for s, (k, j) in zip(graph.scalars, layout)}
    if graph.merged_scalars is not None:
        slots.update({nid: slots[id(graph.scalars[i])] for nid, i in graph.merged_scalars.items()})
    return slots


class _TravelDtypes:
    """The numpy dtype each scalar kind travels in for one graph, indexed by `scalar_kind`:
    its own, or 32 bits where the graph's storage policy narrows the kind (the policy is
    asked only about the kinds the graph has)."""
    __slots__ = ("_storage", "_known")

    def __init__(self, graph: Graph) -> None:
        self._storage = graph.policy.storage
        self._known: dict = {}

    def __getitem__(self, kind: int):
        dtype = self._known.get(kind)
        if dtype is None:
            own = SCALAR_DTYPES[kind]
            dtype = self._known[kind] = NARROWED_TRAVEL.get(self._storage(_KIND_DTYPES[kind]), own)
        return dtype


def travel_dtypes(graph: Graph):
    """`graph`'s scalar kind -> numpy dtype it travels in (SCALAR_DTYPES without a policy)."""
    return SCALAR_DTYPES if graph.policy is None else _TravelDtypes(graph)


def scalar_avals(graph: Graph) -> list:
    """(shape, dtype) of each scalar operand of `graph`'s program."""
    dtypes = travel_dtypes(graph)
    if not graph.packed_scalars:
        return [((), dtypes[scalar_kind(s)]) for s in graph.scalars]
    _, packs = _pack_layout(graph)
    return [((n,), dtypes[k]) for k, n in packs]


def scalar_args(graph: Graph) -> list:
    """`graph`'s scalar operands: Python numbers (numpy scalars where their kind is
    narrowed), or one array per kind when packed."""
    return scalar_values(graph.scalars, graph.packed_scalars, travel_dtypes(graph))


def scalar_values(scalars: list, packed: bool, dtypes: Union[tuple, _TravelDtypes]) -> list:
    """`scalar_args` from its parts: the scalar nodes in the graph's order, whether they
    travel packed, and the dtype each kind travels in (`travel_dtypes`); a captured step
    gathers this step's nodes and keeps the rest from its recorded graph
    (sync/step_capture.py)."""
    if not packed:
        if dtypes is SCALAR_DTYPES:
            return [_SCALAR_TYPES[scalar_kind(s)](s.data) for s in scalars]
        return [_narrowed(dtypes[scalar_kind(s)], [s.data])[0] for s in scalars]
    values: list = [[] for _ in SCALAR_DTYPES]
    for s in scalars:
        values[scalar_kind(s)].append(s.data)
    return [_narrowed(dtypes[k], v) for k, v in enumerate(values) if v]


def _narrowed(dtype, values: list) -> np.ndarray:
    try:
        return np.asarray(values, dtype=dtype)
    except OverflowError:
        big = next(v for v in values if isinstance(v, int) and not np.can_cast(np.min_scalar_type(v), dtype))
        raise StorageRangeError(
            f"lazyxla: the Python int {big} does not fit {np.dtype(dtype).name}, the type int64 is held in "
            "under the storage dtype policy (the TPU's default holds 64-bit types in 32 bits: "
            "docs/design.md, '64-bit types on the TPU'). Keep int64 with LAZYXLA_STORAGE_DTYPES=none "
            "or lx.set_storage_dtypes(None), or pass the value in a tensor.") from None
