"""Graphs walked one way: `post_order`, the one traversal every IR walker uses.

Collecting a sync's graph, the implied-barrier and donation walks, the host split and
host replay of a read, failure containment, provenance stamping, `lx.debug.ir_nodes` and
the IR checker all walk pending IR through it (`reaching` builds on it: which of many
pending values need one of some nodes). Pending graphs are thousands of nodes deep (a long step, a
decoding loop), so the walk is iterative. It is a generator: the caller does its
per-node work between yields and may stop early (`any(...)`). Collect runs it on every
sync, so it does per node what collect's own walk did (one tuple pushed, one dict test
per operand; no push for a leaf or a node whose one operand was walked already), plus the
resumption of the generator.
"""
from __future__ import annotations

from typing import Callable, Collection, Iterable, Iterator, Mapping, Optional

from .node import DATA, SCALAR, Node


def reaching(targets: Collection[Node], skip: Optional[Callable[[Node], bool]] = None) -> Callable[[Node], bool]:
    """`reaches(root)`: whether `root`'s IR holds a node of `targets` (`root` itself
    included). Successive calls share one walk and its answers, so asking it of
    every live storage walks each node once (pending values share most of their nodes).
    `skip(node)`: nodes known to reach none (leaves), left out of the walk."""
    walked: dict = {}
    found: set = set()   # walked nodes that reach a target

    def outside(node: Node) -> bool:
        return node in targets or (skip is not None and skip(node))

    def reaches(root: Node) -> bool:
        for node in post_order([root], walked, stop=outside):
            if any(i in targets or i in found for i in node.inputs):
                found.add(node)
        return root in targets or root in found

    return reaches


def is_leaf(node: Node) -> bool:
    """Device data or a lifted scalar: no computed work below it."""
    return node.op is DATA or node.op is SCALAR


def post_order(roots: Iterable[Node], index: Optional[dict] = None,
               stop: Optional[Callable[[Node], bool]] = None,
               leaves: Optional[Mapping[int, Node]] = None) -> Iterator[Node]:
    """Each node reachable from `roots` once, operands before their users, roots in order.

    `index`: node -> position in the walk's order, filled as each node is yielded (before
    the caller sees it). A node already in it is not walked again, so walks that share one
    dict continue one order (collect and `ir_nodes` walk root by root; the barrier walks
    skip what an earlier storage's walk covered). Fill it only this way. It is keyed by
    the nodes themselves (identity: a Node defines no equality), not their ids: `id()` is a
    call, several per node, and collect walks every node of a step at every sync.
    `stop(node)`, asked when a node is first reached: True leaves it and everything only
    it reaches out of the walk (leaves, nodes already stamped, a node a replay cannot
    take). `leaves`: id(node) -> a node yielded in its place, its operands not walked,
    and indexed as the node it replaces (a value the host computed for a read,
    sync/host_split.py).
    """
    if index is None:
        index = {}
    position = len(index)
    stack = [(root, False) for root in reversed(list(roots))]
    pop, push = stack.pop, stack.append
    while stack:
        node, expanded = pop()
        if node in index:
            continue
        if not expanded:
            if leaves and id(node) in leaves:   # indexed as the node it replaces
                index[node] = position
                position += 1
                yield leaves[id(node)]
                continue
            if stop is not None and stop(node):
                continue
            inputs = node.inputs
            # Operands to walk first: back to this node after them. A leaf, or a node with
            # one operand walked already (a CALL node's GETITEMs after the first: hundreds
            # in a compiled step's graph), falls through and is yielded now, as it would be
            # if pushed back (it would be popped next).
            if inputs and (len(inputs) > 1 or inputs[0] not in index):
                push((node, True))
                for inp in reversed(inputs):
                    if inp not in index:
                        push((inp, False))
                continue
        index[node] = position
        position += 1
        yield node
