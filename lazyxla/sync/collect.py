"""Collecting a graph from the pending values of a set of storages.

One post-order walk (ir/walk.py) does everything a sync needs from the IR: topological
order, parameters (device-data leaves, deduplicated by buffer so one buffer is never
passed, or donated, twice), lifted scalars, and the graph key. The key is the sequence
of `(signature id, operand positions)` per node: structure, operand shapes/dtypes and
exact wiring, never data values, buffer identities, tensor ids or scalar values. Each
lifted scalar is its own operand, except in a long chain (ir/scalars.py), where equal
scalars are merged and the key says which share one. Under a storage dtype policy the key
ends with the policy's token; in SPMD mode it also holds each parameter's sharding and
the sharding requested for each output (`Graph.out_shardings`).

Design: docs/design.md, "sync/collect.py".
"""
from __future__ import annotations

from typing import Optional

from .. import config, metrics
from ..compile import precision
from ..ir.check import check_graph
from ..ir.graph import Graph
from ..ir.scalars import long_chain
from ..ir.node import DATA, GETITEM, SCALAR, SHARDING_CONSTRAINT, Node
from ..ir.walk import post_order
from ..runtime import backend, placement, storage_dtypes
from ..runtime.device_data import unusable_error


# names of the parts of a graph key after its structure
OUT_SHARDINGS, STORAGE_POLICY, MATMUL_PRECISION, PACKED_SCALARS = (
    "output shardings", "storage dtype policy", "matmul precision", "packed scalars")


def collect(device: int, items: list, merge_scalars: bool = False,
            leaves: Optional[dict] = None) -> tuple[Graph, list]:
    """The graph computing `items` (`(root node, storage or None)` pairs, all on `device`),
    and its targets: the `(storage, output slot)` pairs that receive a root's result after
    execution (sync/install.py). A root without a storage is a temporary output (a view
    read back to the host). `merge_scalars`:
    merge equal lifted scalars of a long chain (module docstring); captures keep
    theirs apart (their seeds are replaced per call). `leaves`: id(node) -> a DATA node
    read in its place (values the host computed for a read, sync/host_split.py); the
    node's operands are not visited.
    """
    metrics.counter_add("GraphCollect")   # one walk of a pending graph (a captured step has none)
    index: dict = {}
    order: list = []
    entries: list = []
    params: list = []
    scalars: list = []
    _visit(_grouped([root for root, _ in items]), index, order, entries, params, scalars, leaves)
    root_slot: dict = {}
    outputs: list = []
    targets: list = []
    for root, st in items:
        slot = root_slot.get(root)
        if slot is None:
            slot = root_slot[root] = len(outputs)
            outputs.append(index[root])
        if st is not None:
            targets.append((st, slot))
    updates = _updates(params, targets)
    by_position = sorted(range(len(outputs)),
                         key=lambda slot: (0, updates[slot]) if slot in updates else (1, outputs[slot]))
    rank = [0] * len(outputs)
    for new, old in enumerate(by_position):
        rank[old] = new
    out_shardings = None
    if placement.spmd_enabled():
        out_shardings = tuple(_requested_sharding(order[outputs[i]], updates.get(i), params)
                              for i in by_position)
    outputs = tuple(outputs[i] for i in by_position)
    targets = [(st, rank[slot]) for st, slot in targets]
    merged = None
    chain = long_chain(len(scalars), len(outputs))
    if merge_scalars and chain:
        scalars, merged = _merge_equal_scalars(scalars, index, entries)
    policy = storage_dtypes.current()
    # the structure, then what else makes another program, each part named (compile/explain.py
    # says which one differs)
    key = (device, tuple(entries), outputs)
    if out_shardings is not None:
        key += ((OUT_SHARDINGS, out_shardings),)
    if policy is not None:   # the graph computes in the policy's storage dtypes
        key += ((STORAGE_POLICY, policy.token),)
    level = precision.matmul_precision()
    if level != precision.DEFAULT_LEVEL:   # lowered at another matmul precision: another program
        key += ((MATMUL_PRECISION, level),)
    aliases = _aliases(leaves, order) if leaves else None
    # a long chain packs by counts the key holds (its merged scalars' count); the backend's
    # packing is the key's to say
    chain_packed = long_chain(len(scalars), len(outputs))
    packed = chain_packed or (backend.current().pack_scalars and len(scalars) > 1)
    if packed and not chain_packed:
        key += ((PACKED_SCALARS, True),)
    graph = Graph(device, order, outputs, params, scalars, key, tuple(rank), out_shardings, policy,
                  merged, level, aliases, packed)
    if config.SETTINGS.check_ir:   # LAZYXLA_CHECK_IR: every graph checked before it compiles
        check_graph(graph)
    return graph, targets


def _aliases(leaves: dict, order: list) -> dict:
    """id(node) -> position of the DATA node read in its place, for each node of `leaves`
    (id(node) -> its DATA node) the walk met."""
    replaced = {id(data): nid for nid, data in leaves.items()}
    return {replaced[id(node)]: position for position, node in enumerate(order) if id(node) in replaced}


def _merge_equal_scalars(scalars: list, index: dict, entries: list) -> tuple[list, dict]:
    """One operand per distinct (dtype, value) of `scalars`; rewrites their key
    entries to the shared operand. Returns the distinct scalars and, for every
    scalar node, the index of its operand. Values compare by bits (float.hex):
    -0.0 and 0.0 stay apart."""
    distinct: list = []
    slot_of_value: dict = {}
    slot_of_node: dict = {}
    for node in scalars:
        value = node.data
        bits = (value.real.hex(), value.imag.hex()) if isinstance(value, complex) else \
            value.hex() if isinstance(value, float) else (type(value), value)
        slot = slot_of_value.setdefault((node.dtype, bits), len(distinct))
        if slot == len(distinct):
            distinct.append(node)
        slot_of_node[id(node)] = slot
        position = index[node]
        entries[position] = entries[position][:2] + (slot,)
    return distinct, slot_of_node


def _requested_sharding(root: Node, updated: Optional[int], params: list):
    if root.op is SHARDING_CONSTRAINT:
        return root.args[1]
    if updated is not None and params[updated].shape == root.shape:
        return params[updated].sharding
    return None


def _updates(params: list, targets: list) -> dict:
    """The canonical order of output slots, independent of the order the storages come in.

    A storage made later in one step than in the next (optimizer state created
    during step 0, after that step's gradients) must not change the key. First
    come the new values of tensors updated in place, in the order of the
    parameters they replace: JAX pairs each donated parameter with the first
    output of its shape and dtype, so this keeps every buffer paired with its
    own update (a topological order paired Adam's state with gradients and
    compiled W2 in 1.55 s instead of 1.05 s). Then the other outputs, in
    topological order.

    Returns {output slot: index of the parameter whose storage it updates}."""
    param_of_storage: dict = {}
    for i, data in enumerate(params):
        st = data.owner_storage()
        if st is not None:
            param_of_storage.setdefault(id(st), i)
    updates: dict = {}
    for st, slot in targets:
        i = param_of_storage.get(id(st))
        if i is not None and i < updates.get(slot, len(params)):
            updates[slot] = i
    return updates


def _grouped(roots: list) -> list:
    """`roots` with the outputs (GETITEMs) of one multi-output node together, in output
    order, where the first of them was. The walk then places a node's outputs at one place
    whatever order their storages come in: a fused optimizer's state, made in the first
    step, comes after that step's batch and before every later step's, and the step's
    graph key must be the same from its first step on (docs/design.md, "Fused optimizers")."""
    groups: dict = {}
    for root in roots:
        if root.op is GETITEM:
            groups.setdefault(id(root.args[0]), []).append(root)
    if all(len(g) < 2 for g in groups.values()):
        return roots
    out: list = []
    for root in roots:
        if root.op is not GETITEM:
            out.append(root)
            continue
        group = groups.pop(id(root.args[0]), None)
        if group is not None:
            out.extend(sorted(group, key=lambda r: r.args[1]))
    return out


def _visit(roots: list, index: dict, order: list, entries: list, params: list, scalars: list,
           leaves: Optional[dict]) -> None:
    """The walk (ir/walk.py): each node's position in `index`, the node in `order` and its
    key entry in `entries`; device data deduplicated by buffer into `params`, lifted
    scalars into `scalars`. Nodes and handles key its dicts themselves (identity), as
    `post_order`'s index: no `id()` call per operand."""
    param_index: dict = {}
    for node in post_order(roots, index, leaves=leaves):
        op = node.op
        if op is DATA:
            data = node.data
            pi = param_index.get(data)
            if pi is None:
                if data.donated_in is not None or data.failure is not None:
                    raise unusable_error(data)
                pi = param_index[data] = len(params)
                params.append(data)
            entry = (node.sig, -1, pi) if data.sharding is None else (node.sig, -1, pi, data.sharding)
        elif op is SCALAR:
            entry = (node.sig, -2, len(scalars))
            scalars.append(node)
        else:
            inputs = node.inputs
            # one operand (a GETITEM, a cast, most unary ops): no list to build
            entry = (node.sig, (index[inputs[0]],) if len(inputs) == 1 else tuple([index[i] for i in inputs]))
        order.append(node)
        entries.append(entry)
