"""Graphs walked one way (ir/walk.py): `post_order` yields each node once, operands first,
iteratively; a shared index continues one order; `stop` and `leaves` shape the walk."""
from __future__ import annotations

import torch

from lazyxla.ir.build import data_node, op_node
from lazyxla.ir.node import Node
from lazyxla.ir.walk import is_leaf, post_order, reaching

from helpers import fake_buffer

aten = torch.ops.aten


def _add(a: Node, b: Node) -> Node:
    return op_node(aten.add.Tensor, (a, b), None, (3,), torch.float32)


def _diamond():
    x, y = data_node(fake_buffer((3,))), data_node(fake_buffer((3,)))
    left, right = _add(x, y), _add(y, x)
    return x, y, left, right, _add(left, right)


def test_operands_come_first_and_each_node_once():
    x, y, left, right, top = _diamond()
    assert list(post_order([top])) == [x, y, left, right, top]
    assert list(post_order([right, top, right])) == [y, x, right, left, top]


def test_a_deep_chain_is_walked_without_recursion():
    node = data_node(fake_buffer((3,)))
    for _ in range(50_000):
        node = op_node(aten.neg.default, (node,), None, (3,), torch.float32)
    order = list(post_order([node]))
    assert len(order) == 50_001 and order[-1] is node and order[0].op == "data"


def test_a_shared_index_continues_one_order():
    x, y, left, right, top = _diamond()
    index: dict = {}
    assert list(post_order([left], index)) == [x, y, left]
    assert list(post_order([top], index)) == [right, top]   # what the first walk saw is not walked again
    assert [index[n] for n in (x, y, left, right, top)] == [0, 1, 2, 3, 4]


def test_stop_leaves_a_node_and_what_only_it_reaches_out():
    x, y, left, right, top = _diamond()
    assert list(post_order([top], stop=is_leaf)) == [left, right, top]
    assert list(post_order([top], stop=lambda n: n is left)) == [y, x, right, top]


def test_leaves_are_yielded_in_place_of_the_nodes_they_replace():
    x, y, left, right, top = _diamond()
    value = data_node(fake_buffer((3,)))
    index: dict = {}
    assert list(post_order([top], index, leaves={id(left): value})) == [value, y, x, right, top]
    assert index[left] == 0 and value not in index


def test_a_walk_can_end_early():
    x, y, left, right, top = _diamond()
    walk = post_order([top])
    assert next(walk) is x and any(n is left for n in walk)
    assert next(walk) is right   # the generator resumes where the caller left it


def test_reaching_answers_for_many_roots_from_one_walk():
    x, y, left, right, top = _diamond()
    z = data_node(fake_buffer((3,)))
    apart = _add(z, z)
    reaches = reaching({left}, skip=is_leaf)
    assert reaches(top) and reaches(left) and not reaches(right) and not reaches(apart)
    assert reaching({x}, skip=is_leaf)(right)   # a target is found even where leaves are skipped


def _reference_order(roots: list) -> list:
    """Post-order by recursion (small graphs only): what `post_order` must yield."""
    seen: set = set()
    order: list = []

    def visit(node: Node) -> None:
        if id(node) in seen:
            return
        for inp in node.inputs:
            visit(inp)
        seen.add(id(node))
        order.append(node)
    for root in roots:
        visit(root)
    return order


def test_elements_of_a_walked_node_and_leaves_keep_the_post_order():
    # The walk yields a leaf, or a node whose one operand is walked already (a CALL node's
    # GETITEMs after the first), without pushing it back: the order must not change.
    import random
    from lazyxla.ir.build import getitem_node
    rng = random.Random(0)
    for _ in range(30):
        nodes = [data_node(fake_buffer((3,))) for _ in range(4)]
        for _ in range(40):
            kind = rng.random()
            if kind < 0.3:
                operands = tuple(rng.sample(nodes, rng.randint(1, 3)))
                multi = op_node(aten.var_mean.correction, (operands[0],) + operands[1:], None,
                                ((3,), (3,)), (torch.float32, torch.float32), 2)
                nodes += [getitem_node(multi, i) for i in rng.sample(range(2), 2)]
            elif kind < 0.8:
                nodes.append(_add(rng.choice(nodes), rng.choice(nodes)))
            else:
                nodes.append(op_node(aten.neg.default, (rng.choice(nodes),), None, (3,), torch.float32))
        roots = rng.sample(nodes, 8)
        assert [id(n) for n in post_order(roots)] == [id(n) for n in _reference_order(roots)]
