"""Why did this graph compile? Compare a new key with the closest earlier key.

Keys are tuples of per-node entries (compile cache key = graph key + donors).
The closest earlier graph is the one sharing the most node signatures (then
the longest common prefix); the first entry that differs names the node whose
op, shapes, static arguments or operand wiring changed; equal graphs that
differ only in their donor set are reported as such.
"""
from __future__ import annotations

import collections
from typing import Optional

from ..ir.node import DATA, SCALAR, sig_of
from ..ir.printer import op_text

_HISTORY = 16
_recent: dict = collections.defaultdict(lambda: collections.deque(maxlen=_HISTORY))


def forget() -> None:
    """Drop the remembered keys: the next compile on each device is explained as the first."""
    _recent.clear()


def _common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _describe(entry) -> str:
    sig = sig_of(entry[0])
    if sig is None:
        return "a node whose signature was forgotten (the signature table is bounded: ir/node.py)"
    head = sig[0]
    if head is DATA or head == DATA:
        where = f" sharded {entry[3]}" if len(entry) == 4 else ""   # SPMD: its sharding is in the key
        stored = f" stored as {sig[3]}" if len(sig) > 3 and sig[3] != sig[2] else ""
        return f"parameter {entry[2]} of shape {list(sig[1])} {sig[2]}{stored}{where}"
    if head is SCALAR or head == SCALAR:
        return f"runtime scalar ({sig[1]})"
    parts = []
    for p in sig[1:]:
        if isinstance(p, tuple) and len(p) == 4 and isinstance(p[0], tuple):
            parts.append(f"{list(p[0])}:{p[3]}".replace("torch.", ""))
        else:
            parts.append(repr(p))
    return f"{op_text(head)}({', '.join(parts)}) reading nodes {entry[1] if len(entry) == 2 else '?'}"


# what a change of each named part of a graph key (sync/collect.py) means to the user
_PART_CHANGES = {"output shardings": "other output shardings were requested",
                 "storage dtype policy": "under another storage dtype policy (lx.set_storage_dtypes)",
                 "matmul precision": "at another matmul precision (lx.set_matmul_precision, "
                                     "torch.set_float32_matmul_precision)",
                 "packed scalars": "its scalars travel otherwise (the backend's packing)"}


def _origin_from(order: Optional[list], n: int) -> str:
    """With provenance on: the user's line that made node `n`, else that of the first
    later node that has one (a parameter has none; the op reading it does)."""
    for i, node in enumerate(order[n:] if order else ()):
        origin = getattr(node, "origin", None)
        if origin:
            return f" (made at {origin})" if i == 0 else f" (first op from there made at {origin})"
    return ""


def explain(key: tuple, donors: tuple, order: Optional[list] = None) -> str:
    """Explanation of a cache miss for (graph key, donors); records the key. `order`: the
    graph's nodes, whose recorded origins (provenance) name the user's line."""
    device, entries, outputs = key[:3]
    history = _recent[device]
    try:
        if not history:
            return f"first graph compiled on lazyxla:{device}"
        sigs = collections.Counter(e[0] for e in entries)

        def similarity(kd):
            old = kd[0][1]
            shared = sum((collections.Counter(e[0] for e in old) & sigs).values())
            return shared, _common_prefix(old, entries)

        best_key, best_donors = max(history, key=similarity)
        old_entries = best_key[1]
        n = _common_prefix(old_entries, entries)
        if n == len(old_entries) == len(entries):
            if best_key[2] != outputs:
                return f"same {n} nodes as an earlier graph, but it returns different outputs"
            old_parts, new_parts = dict(best_key[3:]), dict(key[3:])
            for part in sorted(set(old_parts) | set(new_parts)):
                if old_parts.get(part) != new_parts.get(part):
                    return f"same {n} nodes as an earlier graph, but {_PART_CHANGES.get(part, 'another ' + part)}"
            return (f"same graph as an earlier one ({n} nodes); only the donor set changed: "
                    f"{list(best_donors)} -> {list(donors)}")
        if n >= len(entries):
            return f"a prefix of an earlier graph: {len(entries)} of its {len(old_entries)} nodes"
        if n >= len(old_entries):
            return f"an earlier graph ({len(old_entries)} nodes) plus {len(entries) - n} more nodes"
        return (f"differs from the closest earlier graph at node {n} of {len(entries)}: "
                f"was {_describe(old_entries[n])}; now {_describe(entries[n])}{_origin_from(order, n)}")
    finally:
        history.append((key, donors))
