"""The IR checker (ir/check.py): well-formed graphs pass, and each broken rule is named,
with the node that breaks it, before anything compiles."""
from __future__ import annotations

import gc

import pytest
import torch

import lazyxla as lx
from lazyxla.ir.build import OpSignature, call_node, data_node, getitem_node, op_node, scalar_node, traced_node
from lazyxla.ir.call import Subprogram
from lazyxla.ir.check import MalformedIR, check_graph, check_node, check_roots
from lazyxla.ir.graph import Graph
from lazyxla.ir.node import GETITEM, OPT_BARRIER, VIEW_SCATTER, Node, intern_sig
from lazyxla.sync.collect import collect

from helpers import counter, fake_buffer

aten = torch.ops.aten


def _data(shape=(3,), dtype=torch.float32) -> Node:
    return data_node(fake_buffer(shape, dtype))


def _add(a: Node, b: Node) -> Node:
    return op_node(aten.add.Tensor, (a, b), None, a.shape, a.dtype)


def _node(op, args, inputs, shape=(3,), dtype=torch.float32, nout=0, kwargs=None, sig=None) -> Node:
    """A node made by hand, past ir/build.py: how a malformed one would look."""
    return Node(op, args, kwargs, inputs, shape, dtype, intern_sig(("hand-made", id(args))) if sig is None else sig,
                None, nout)


def test_a_well_formed_graph_passes(dev):
    x = torch.randn(4, 3).to(dev)
    y = (x * 2).t()[1:]
    y.add_(1)
    values, indices = x.max(dim=0)
    lx.optimization_barrier_([values])
    before = counter("IRCheckedGraph")   # (under --check-ir the upload's graph was checked too)
    nodes = lx.debug.check_ir([x, y, values, indices])
    assert nodes >= 8 and counter("IRCheckedGraph") - before == 1
    assert check_roots([t._st.value for t in (x, values, indices)]) >= 4


def test_a_training_step_checked_at_every_sync(dev, checked_ir):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference = torch.nn.Sequential(*[torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)])
    reference.load_state_dict(model.state_dict())
    model.to(dev)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True) for m in (model, reference)]
    data = torch.randn(5, 4)
    for _ in range(3):
        for m, opt, x in ((model, opts[0], data.to(dev)), (reference, opts[1], data)):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    lx.sync()
    assert counter("IRCheckedGraph") >= 3
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a.cpu(), b.detach(), rtol=1e-5, atol=1e-6)


def test_inputs_must_be_the_nodes_among_the_arguments():
    a, b = _data(), _data()
    with pytest.raises(MalformedIR, match=r"aten.add.Tensor .*its inputs \(1\) are not the 2 nodes among"):
        check_node(_node(aten.add.Tensor, (a, b), (a,)))
    with pytest.raises(MalformedIR, match="are not the 2 nodes among its arguments, in order"):
        check_node(_node(aten.add.Tensor, (a, b), (b, a)))
    with pytest.raises(MalformedIR, match="list argument"):
        check_node(_node(aten.cat.default, ([a, b],), (a, b), shape=(6,)))


def test_avals_must_be_well_formed():
    a = _data()
    with pytest.raises(MalformedIR, match="shape must be a tuple of sizes"):
        check_node(_node(aten.neg.default, (a,), (a,), shape=[3]))
    with pytest.raises(MalformedIR, match="2 outputs needs a shape and a dtype per output"):
        check_node(_node(OPT_BARRIER, (a, a), (a, a), shape=((3,), (3,)), dtype=torch.float32, nout=2))


def test_leaves_are_checked():
    data = _data()
    data.shape = (4,)
    with pytest.raises(MalformedIR, match="DATA node's buffer must have its shape and dtype"):
        check_node(data)
    scalar = scalar_node(1.5)
    scalar.dtype = torch.int64
    with pytest.raises(MalformedIR, match="a float scalar cannot travel as torch.int64"):
        check_node(scalar)
    scalar = scalar_node(2)
    scalar.data = torch.tensor(2)
    with pytest.raises(MalformedIR, match="holds a Python number"):
        check_node(scalar)


def test_getitem_reads_an_existing_output():
    a = _data()
    barrier = op_node(OPT_BARRIER, (a, a), None, ((3,), (3,)), (torch.float32, torch.float32), 2)
    check_node(getitem_node(barrier, 1))
    with pytest.raises(MalformedIR, match="GETITEM index 2 names no computed output"):
        check_node(_node(GETITEM, (barrier, 2), (barrier,)))
    with pytest.raises(MalformedIR, match="GETITEM reads"):
        check_node(_node(GETITEM, (a, 0), (a,)))
    with pytest.raises(MalformedIR, match="must have the avals of output 0"):
        check_node(_node(GETITEM, (barrier, 0), (barrier,), dtype=torch.float16))


def test_internal_ops_keep_their_operands_avals():
    a, b = _data(), _data((3,), torch.int32)
    with pytest.raises(MalformedIR, match="must have the avals of its operands"):
        check_node(_node(OPT_BARRIER, (a, b), (a, b), ((3,), (3,)), (torch.float32, torch.float32), 2))
    with pytest.raises(MalformedIR, match="one output per operand"):
        check_node(_node(OPT_BARRIER, (a,), (a,), ((3,), (3,)), (torch.float32, torch.float32), 2))
    with pytest.raises(MalformedIR, match="must have the avals of its base"):
        check_node(_node(VIEW_SCATTER, (a, a, aten.slice.Tensor, (0, 0, 3)), (a, a), shape=(4,)))
    program = Subprogram(lambda x: (x,), "probe", "probe", [((3,), torch.float32)])
    node = call_node(program, (a,))
    check_node(node)
    with pytest.raises(MalformedIR, match="has its program's 1 outputs"):
        check_node(_node(program, (a,), (a,), ((3,), (3,)), (torch.float32, torch.float32), 2))


def test_aten_nodes_follow_their_record_and_schema():
    a = _data()
    with pytest.raises(MalformedIR, match="no lowering rule in its record"):
        check_node(_node(aten.linalg_norm.default, (a,), (a,), shape=()))
    with pytest.raises(MalformedIR, match="4 positional arguments for a schema that takes 1"):
        check_node(_node(aten.neg.default, (a, 1, 2, 3), (a,)))
    with pytest.raises(MalformedIR, match=r"keyword arguments \['beta'\] are not in the schema"):
        check_node(_node(aten.add.Tensor, (a, a), (a, a), kwargs={"beta": 2}))
    # pow.Scalar is (Scalar self, Tensor exponent): the node an in-place pow_(2) once made
    with pytest.raises(MalformedIR, match="argument 'exponent' is a tensor in the schema, but holds int"):
        check_node(_node(aten.pow.Scalar, (a, 2), (a,)))
    with pytest.raises(MalformedIR, match="returns 2 values, the node has 0 outputs"):
        check_node(_node(aten.var_mean.correction, (a,), (a,)))
    seeded = scalar_node(7)
    check_node(op_node(aten.bernoulli.p, (a, 0.5), {"seed": seeded}, (3,), torch.float32))


def test_one_signature_stands_for_one_structure():
    signature = OpSignature(("probe-collision",), (3,), torch.float32)
    a, b = _data(), _data((3,), torch.float16)
    check_node(traced_node(aten.neg.default, (a,), None, (a,), signature))
    other = _data()   # another operand of the same avals: the same structure
    check_node(traced_node(aten.neg.default, (other,), None, (other,), signature))
    with pytest.raises(MalformedIR, match=f"signature {signature.sig} stood for .* and now for .*share compiled"):
        check_node(traced_node(aten.neg.default, (b,), None, (b,), signature))


def test_every_node_has_the_builders_signature(dev):
    # one builder (ir/build.py `signature`) keys every kind of node; a node keyed by hand,
    # e.g. a GETITEM whose key forgot its index, is caught: equal nodes would miss each other
    a = _data()
    pair = op_node(OPT_BARRIER, (a, a), None, ((3,), (3,)), (torch.float32, torch.float32), 2)
    for node in (a, scalar_node(1.5), pair, getitem_node(pair, 1), _add(a, a)):
        check_node(node)
    forgot_index = intern_sig((GETITEM, (3,), torch.float32))
    with pytest.raises(MalformedIR, match="the builder .* gives a node of its parts"):
        check_node(_node(GETITEM, (pair, 1), (pair,), sig=forgot_index))
    # a traced call's key is the tracer's (it holds strides): marked, never rebuilt
    x = torch.randn(2, 3).to(dev)
    check_roots([(x.t() * 2)._st.value])


def _graph(order, params, outputs, scalars=()) -> Graph:
    return Graph(0, order, outputs, params, list(scalars), (), tuple(range(len(outputs))))


def test_a_graph_is_in_topological_order_with_its_leaves_accounted_for():
    buffer = fake_buffer()
    a = data_node(buffer)
    s = scalar_node(2.0)
    total = op_node(aten.mul.Tensor, (a, s), None, (2, 3), torch.float32)
    assert check_graph(_graph([a, s, total], [buffer], (2,), [s])) == 3
    with pytest.raises(MalformedIR, match=r"operand .* is at position 2, not before 0"):
        check_graph(_graph([total, s, a], [buffer], (0,), [s]))
    with pytest.raises(MalformedIR, match="is not in the graph"):
        check_graph(_graph([s, total], [buffer], (1,), [s]))
    with pytest.raises(MalformedIR, match="buffer is not among the graph's parameters"):
        check_graph(_graph([a, s, total], [], (2,), [s]))
    with pytest.raises(MalformedIR, match="1 of its 2 parameters are read by no node"):
        check_graph(_graph([a, s, total], [buffer, fake_buffer()], (2,), [s]))
    with pytest.raises(MalformedIR, match="scalar is not among the graph's scalar operands"):
        check_graph(_graph([a, s, total], [buffer], (2,)))
    with pytest.raises(MalformedIR, match="outputs .* must be distinct positions"):
        check_graph(_graph([a, s, total], [buffer], (2, 3), [s]))


def test_collect_checks_under_the_setting_and_names_the_node(dev, checked_ir):
    x = torch.ones(3).to(dev)
    value = x._st.value
    bad = _node(aten.add.Tensor, (value, value), (value,))   # one operand missing from inputs
    graph, _ = collect(0, [(_add(value, value), None)])
    assert len(graph.order) == 2
    with pytest.raises(MalformedIR, match=r"malformed IR at node aten.add.Tensor .*This is a lazyxla bug"):
        collect(0, [(bad, None)])
    y = torch.zeros(3).to(dev)
    y._st.write(bad)
    with pytest.raises(MalformedIR):
        lx.sync()
    del y
    gc.collect()
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]
