"""The collected graph: what a sync hands to the compiler and the runtime.

It is data, built by `sync/collect.py` and consumed by `compile/` (program and
cache key), `alias/` (donor planning) and `runtime/execute.py` (operands and
where results go), so it sits below all of them; so do the two walks over
pending values that donation planning and sync both need.
"""
from __future__ import annotations

import itertools
from typing import Any, Optional, Protocol

from .bounded import BoundedTable
from .node import DATA, Node
from .walk import post_order


def byte_size(shape, dtype) -> int:
    """Bytes of a dense buffer of `shape` and (torch) `dtype`."""
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


class DeviceBuffer(Protocol):
    """What the graph knows of a parameter's buffer (runtime.device_data.DeviceData, a
    layer above, is one): its shape, dtype and storage dtype (the buffer's own, narrower
    under a storage policy), and the graph that consumed it by donation."""
    shape: tuple
    dtype: Any
    storage: Any
    donated_in: Optional[str]


# Graph key -> a small id that stands for it in the tables every sync looks a graph up in
# (the donor plans, the compile cache): a key is a tuple of a step's every node, hashed and
# compared in full at each lookup, an id once per sync. Ids are never reused (a counter), so
# a forgotten key met again gets a new id and no table can hand it another key's entry (its
# graph compiles again). Bounded as the compile cache is by default, which held the keys
# themselves before: the keys kept in memory stay as many.
KEY_TABLE_CAP = 1024
_KEY_IDS = BoundedTable(KEY_TABLE_CAP)
_next_key_id = itertools.count()


def key_id(key: tuple) -> int:
    """The id of graph key `key` (the table above)."""
    kid = _KEY_IDS.get(key)
    if kid is None:
        kid = _KEY_IDS.put(key, next(_next_key_id))
    return kid


class Graph:
    __slots__ = ("device", "order", "outputs", "params", "scalars", "key", "key_id", "root_slots",
                 "out_shardings", "policy", "merged_scalars", "matmul_precision", "aliases",
                 "packed_scalars")

    def __init__(self, device: int, order: list, outputs: tuple, params: list,
                 scalars: list, key: tuple, root_slots: tuple,
                 out_shardings: Optional[tuple] = None, policy: Any = None,
                 merged_scalars: Optional[dict] = None, matmul_precision: str = "highest",
                 aliases: Optional[dict] = None, packed_scalars: bool = False) -> None:
        self.device = device
        self.order = order            # nodes in topological order
        # id(node) -> position in `order` of the DATA node read in its place (a value the host
        # computed for a read, sync/host_split.py); None: every operand is in `order` itself
        self.aliases = aliases
        self.outputs = outputs        # positions in `order` of the distinct root nodes, ascending
        self.params: list[DeviceBuffer] = params
        self.scalars: list[Node] = scalars   # one per scalar operand
        # scalars travel packed, one vector per kind (ir/scalars.py), rather than one operand each
        self.packed_scalars = packed_scalars
        # equal scalars merged into one operand (sync/collect.py): id(scalar node) ->
        # index in `scalars`, for every scalar node; None: each node is its own operand
        self.merged_scalars = merged_scalars
        # level of float32 matmuls the graph is lowered at (compile/precision.py; in the key)
        self.matmul_precision = matmul_precision
        self.key = key
        self.key_id = key_id(key)
        self.root_slots = root_slots  # output slot of each distinct root, in the order given
        self.out_shardings = out_shardings  # SPMD: requested sharding per output slot, else None
        # storage dtype policy the graph computes in (runtime/storage_dtypes.StoragePolicy:
        # `storage(dtype)` is each node's device dtype), None: every node in its own dtype
        self.policy = policy


def positions(graph: Graph) -> dict:
    """id(node) -> position in `graph.order`, for every node an operand may name."""
    index = {id(n): i for i, n in enumerate(graph.order)}
    if graph.aliases:
        index.update(graph.aliases)
    return index


def data_reachable(roots) -> set:
    """ids of every DeviceData reachable from `roots` (pending values)."""
    return {id(node.data) for node in post_order(roots) if node.op is DATA}


def reads_donated(root: Node) -> bool:
    """True if computing `root` needs a buffer that was donated (slow path only)."""
    return any(node.op is DATA and node.data.donated_in is not None for node in post_order([root]))
