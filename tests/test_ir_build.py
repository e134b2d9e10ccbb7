"""IR built one way (ir/build.py): only ir/ makes nodes, and each constructor computes the
node's signature from its parts, so equal structure means equal signature and any
difference in op, static arguments, operand or output avals means another."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from lazyxla.frontend.primitives import cast_node, expand_node
from lazyxla.frontend.tracing import MetaEntry
from lazyxla.ir.build import OpSignature, call_node, call_outputs, data_node, getitem_node, op_node, scalar_node, \
    traced_node
from lazyxla.ir.call import Subprogram
from lazyxla.ir.node import DATA, GETITEM, OPT_BARRIER, Node

from helpers import fake_buffer

PACKAGE = Path(__file__).resolve().parents[1] / "lazyxla"
aten = torch.ops.aten


def _node_calls(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            fn = node.func
            if (isinstance(fn, ast.Name) and fn.id == "Node") or (isinstance(fn, ast.Attribute) and fn.attr == "Node"):
                lines.append(node.lineno)
    return lines


def test_only_ir_makes_nodes():
    outside = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
               if p.relative_to(PACKAGE).parts[0] != "ir" for line in _node_calls(p)]
    assert not outside, "Node(...) outside lazyxla/ir/ (use ir/build.py's constructors):\n" + "\n".join(outside)
    assert _node_calls(PACKAGE / "ir" / "build.py")   # the rule sees the calls where they are


def _leaf(shape=(2, 3), dtype=torch.float32) -> Node:
    return data_node(fake_buffer(shape, dtype))


def test_op_node_operands_and_signature_come_from_its_parts():
    a, b = _leaf(), _leaf()
    s = scalar_node(2.0)
    node = op_node(aten.add.Tensor, (a, b), {"alpha": s}, (2, 3), torch.float32)
    assert node.inputs == (a, b, s) and node.nout == 0 and node.data is None
    same = op_node(aten.add.Tensor, (_leaf(), _leaf()), {"alpha": scalar_node(5.0)}, (2, 3), torch.float32)
    assert same.sig == node.sig   # values never enter a signature
    others = [
        op_node(aten.sub.Tensor, (a, b), {"alpha": s}, (2, 3), torch.float32),                  # op
        op_node(aten.add.Tensor, (a, _leaf(dtype=torch.float64)), {"alpha": s}, (2, 3), torch.float32),  # operand
        op_node(aten.add.Tensor, (a, b), {"alpha": s}, (2, 3), torch.float64),                  # output
        op_node(aten.add.Tensor, (a, b), None, (2, 3), torch.float32),                          # kwargs
    ]
    assert len({n.sig for n in others} | {node.sig}) == 5


def test_static_floats_are_keyed_by_their_bits():
    x = _leaf()

    def sig(value):
        return op_node(aten.mul.Scalar, (x, value), None, (2, 3), torch.float32).sig
    assert sig(0.0) != sig(-0.0) and sig(1.0) != sig(1)
    assert sig(math.nan) == sig(float("nan"))


def test_casts_and_expands_share_a_signature_when_their_structure_does():
    a, b = _leaf((3,)), _leaf((3,))
    assert cast_node(a, torch.float64).sig == cast_node(b, torch.float64).sig != cast_node(a, torch.float16).sig
    assert cast_node(a, torch.float32) is a and expand_node(a, (3,)) is a
    assert expand_node(a, (2, 3)).sig == expand_node(b, (2, 3)).sig != expand_node(a, (4, 3)).sig
    assert expand_node(a, (2, 3)).inputs == (a,)


def test_a_list_argument_is_refused():
    with pytest.raises(TypeError, match="list argument"):
        op_node(aten.cat.default, ([_leaf(), _leaf()],), None, (4, 3), torch.float32)


def test_call_nodes_are_keyed_by_the_program_key_and_operand_avals():
    def program(key):
        return Subprogram(lambda x: (x, x), key, "twice", [((2, 3), torch.float32)] * 2)
    a = _leaf()
    first, again = call_node(program("k"), (a,)), call_node(program("k"), (_leaf(),))
    assert first.sig == again.sig and first.nout == 2 and first.inputs == (a,)
    assert call_node(program("other"), (a,)).sig != first.sig
    assert call_node(program("k"), (_leaf(dtype=torch.float16),)).sig != first.sig
    items = call_outputs(program("k"), (a,))
    assert [i.op for i in items] == [GETITEM, GETITEM] and items[1].args[1] == 1
    assert [i.sig for i in items] == [getitem_node(first, 0).sig, getitem_node(first, 1).sig]


def test_a_reused_call_signature_is_the_builders():
    """call_node keeps a program's last CALL signature while its operands' avals repeat (a
    compiled step's calls): each node still has the signature, args and inputs op_node gives."""
    program = Subprogram(lambda x: (x,), "reused", "once", [((2, 3), torch.float32)])
    sigs = []
    for dtype in (torch.float32, torch.float32, torch.float16, torch.float32, torch.float16):
        operand = _leaf(dtype=dtype)
        node = call_node(program, (operand,))
        built = op_node(program, (operand,), None, program.out_shapes, program.out_dtypes, 1)
        assert (node.sig, node.args, node.inputs, node.nout) == (built.sig, built.args, built.inputs, 1)
        sigs.append(node.sig)
    assert sigs[0] == sigs[1] == sigs[3] and sigs[2] == sigs[4] != sigs[0]


def test_barrier_nodes_have_one_output_per_operand():
    a, b = _leaf((2,)), _leaf((3,), torch.int32)
    node = op_node(OPT_BARRIER, (a, b), None, ((2,), (3,)), (torch.float32, torch.int32), 2)
    assert node.nout == 2 and node.inputs == (a, b)
    assert getitem_node(node, 1).shape == (3,) and getitem_node(node, 1).dtype == torch.int32


def test_traced_nodes_take_the_tracers_interned_signature():
    signature = OpSignature(("probe", (2, 3)), (2, 3), torch.float32)
    a = _leaf()
    node = traced_node(aten.neg.default, (a,), None, (a,), signature)
    assert (node.sig, node.shape, node.dtype, node.nout) == (signature.sig, (2, 3), torch.float32, 0)
    assert OpSignature(("probe", (2, 3)), (2, 3), torch.float32).sig == signature.sig
    spec = ((2,), (1,), 0, torch.float32)
    entry = MetaEntry(("probe-multi",), (spec, None), True)   # an output the call did not compute
    assert (entry.shape, entry.dtype, entry.nout) == (((2,), None), (torch.float32, None), 2)


def test_data_nodes_are_keyed_by_shape_dtype_and_storage_dtype():
    a = data_node(fake_buffer((4,)))
    assert a.op is DATA and a.sig == data_node(fake_buffer((4,))).sig
    assert a.sig != data_node(fake_buffer((4,), stored_dtype=torch.bfloat16)).sig
