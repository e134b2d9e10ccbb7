"""The pass that fingerprints a captured step or token: one walk over a barrier's (or a
read's) roots that gathers the buffers and lifted scalars its executable takes and builds the
flat tuple naming its program, donors and output slots (sync/step_capture.py's module
docstring says what goes in it; sync/read_capture.py uses it for a read that ends a token).

The pass runs at every captured barrier over every call operand and pending storage, so it
is written for few Python operations per item: dictionaries keyed by the nodes, buffers and
storages themselves (identity hashes, no `id()` call per lookup), the logged calls' outputs
entered before the walk in C (an operand or storage reading one costs one lookup), a buffer's
part computed by one function call with the live holders counted once per pass, and one
reused stack.

Design: docs/design.md, "A captured step (issue 51)".
"""
from __future__ import annotations

from collections import Counter
from itertools import repeat
from typing import Iterable, NamedTuple, Optional

from ..alias import switches
from ..compile import precision
from ..ir.node import DATA, SCALAR
from ..runtime import storage_dtypes


class Holders(NamedTuple):
    """What a buffer's part of the fingerprint reads besides the buffer (`_leaf_code`): per
    buffer, how many live storages hold it as their value; per pending storage, its position
    among the barrier's items."""
    held: Counter
    position: dict


def header(device: int) -> list:
    """What else makes another program than the graph's structure: aliasing, the matmul
    precision, the storage dtype policy's token."""
    policy = storage_dtypes.current()
    return [device, switches.aliasing_enabled(device), precision.matmul_precision(),
            None if policy is None else policy.token]


def holders(live: list, items: list) -> Holders:
    """`Holders` of the device's live storages `live` and the pending items (`(root, storage
    or None)`) the graph computes."""
    held = Counter([value.data for st in live if (value := st.value).op is DATA])
    return Holders(held, {st: i for i, (_, st) in enumerate(items) if st is not None})


def walk(parts: list, outputs: list, roots: Iterable, entry_leaves: dict, holding: Holders,
         limit: int, leaves: list, scalars: list, nodes: Optional[list] = None, keys=None):
    """The fingerprint of `roots` after `parts`, filling `leaves` and `scalars` (and `nodes`,
    when given: every node met but a logged call's output, in a fixed order, so that a graph
    of the same fingerprint has its nodes at the same positions); a string saying why where
    the graph cannot be captured. `outputs`: per logged call, its GETITEMs (met as `(call,
    index)`); `entry_leaves`: {id(entry value): its staged DATA node}
    (sync/entries.py); `holding`: see `Holders`; `limit`: the most traced nodes; `keys`: a
    node's part of the fingerprint by its signature, `keys.get(sig)` or, the first time,
    `keys.fill(node)` (default: the signature itself). One explicit stack, no recursion: a
    chain of `limit` nodes is as cheap as a wide graph."""
    held, position = holding
    leaf_index: dict = {}   # buffer -> its position in `leaves`
    seen: dict = {}         # node -> its reference in the fingerprint (never None)
    # each logged call's own GETITEMs are known before the walk: their references `(call,
    # index)` entered at once, in C, so a call operand or pending storage that reads one is a
    # single lookup. Another node reading the same output is a node of its own in the
    # collected graph, so it is traced work here (a GETITEM not among these).
    for k, items in enumerate(outputs):
        seen.update(zip(items, zip(repeat(k), range(len(items)))))
    expanded: set = set()   # traced nodes whose operands are on the stack
    traced = 0
    append = parts.append
    stack: list = []
    for top in roots:
        if entry_leaves:   # an entry value: its staged buffer, as collect() reads it
            top = entry_leaves.get(id(top), top)
        ref = seen.get(top)
        if ref is not None:   # most operands of a later call: a buffer or output met before
            append(ref)
            continue
        stack.append(top)
        while stack:
            node = stack[-1]
            if entry_leaves:
                node = entry_leaves.get(id(node), node)
            if node in seen:
                stack.pop()
                continue
            op = node.op
            sig = node.sig
            if keys is not None:
                known = keys.get(sig)
                sig = keys.fill(node) if known is None else known
            if op is DATA:
                data = node.data
                p = leaf_index.get(data)
                if p is None:
                    if data.donated_in is not None or data.failure is not None or data.sharding is not None:
                        return "the step reads a donated, failed or sharded buffer"
                    p = leaf_index[data] = len(leaves)
                    leaves.append(data)
                    append(_leaf_code(sig, data, held, position))
                else:   # another node of a buffer met before
                    append(("again", p))
                seen[node] = -1 - p
            elif op is SCALAR:   # a lifted scalar: an operand whose value is this step's
                seen[node] = ("scalar", len(scalars))
                scalars.append(node)
                append(sig)
            else:
                inputs = node.inputs
                if entry_leaves:
                    inputs = tuple(entry_leaves.get(id(i), i) for i in inputs)
                if node not in expanded:
                    expanded.add(node)
                    traced += 1   # counted on the way down: a chain stops at the bound, not at its end
                    if traced > limit:
                        return f"more than {limit} nodes of lazily traced work in the step"
                    todo = [i for i in inputs if i not in seen]
                    if todo:
                        todo.reverse()
                        stack.extend(todo)
                        continue
                seen[node] = len(seen)   # a traced node: a plain int (a buffer's is negative)
                append((sig, tuple([seen[i] for i in inputs])))
            if nodes is not None:
                nodes.append(node)
            stack.pop()
        append(seen[top])
    return tuple(parts)


def _leaf_code(sig, data, held: Counter, position: dict) -> tuple:
    """What the donor plan decides a buffer by (alias/planner.py), besides the structure:
    its owner (a pending storage's position; -1 none; -2 it still holds the buffer; -3 moved
    on), whether other tensors hold it, its flags."""
    owner = data.owner
    if owner is not None:
        owner = owner()
    holders = held.get(data, 0)
    if owner is None:
        where = -1
    else:
        where = position.get(owner)
        if where is None:
            value = owner.value
            if value.op is DATA and value.data is data:
                where = -2
                holders -= 1
            else:
                where = -3
    return (sig, where, holders > 0, data.donate, data.read_only, data.external is None)
