"""lx.debug.explain_op: the route of an op of each kind, and the one-record-per-op registry."""
from __future__ import annotations

import warnings

import pytest
import torch

import lazyxla as lx
from lazyxla.ir import ops
from lazyxla.lower.registry import LOWERINGS, register

aten = torch.ops.aten


@pytest.mark.parametrize("name, kind, function, file", [
    ("aten::addmm", "lowered", "lazyxla.lower.linalg._addmm", "lazyxla/lower/linalg.py:"),
    ("aten::add_.Tensor", "lowered", "lazyxla.lower.elementwise._add", "lazyxla/lower/elementwise.py:"),
    ("aten::native_dropout", "decomposed", "_native_dropout", "lazyxla/"),
    ("aten::flatten.using_ints", "decomposed", "torch._ops.OpOverload.decompose", "torch/_ops.py:"),
    ("aten::slice.Tensor", "view", "lazyxla.lower.views._slice", "lazyxla/lower/views.py:"),
    ("aten::nonzero", "host fallback", "lazyxla.frontend.fallback.run_on_host", "lazyxla/frontend/fallback.py:"),
    ("aten::copy_", "special", "lazyxla.frontend.handlers._copy", "lazyxla/frontend/handlers.py:"),
    ("aten::_foreach_mul_.Scalar", "foreach", "lazyxla.frontend.foreach.foreach_handler",
     "lazyxla/frontend/foreach.py:"),
])
def test_explain_op_names_route_and_function(name, kind, function, file, capsys):
    found = lx.debug.explain_op(name)
    printed = capsys.readouterr().out
    assert found.kind == kind
    assert function in found.function
    assert file in found.file
    assert f": {kind}" in printed.splitlines()[0] and function in printed and file in printed


def test_route_matches_what_runs(dev):
    # a host-fallback op really falls back, a lowered op really does not
    # (the counter, not the warning: run_on_host warns once per op per process, and an
    # earlier test may have run nonzero on the host already)
    before = lx.metrics.counter_value("aten::nonzero") or 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.nonzero(torch.tensor([0.0, 1.0, 2.0], device=dev))
    assert (lx.metrics.counter_value("aten::nonzero") or 0) == before + 1


def test_explain_op_bad_names():
    with pytest.raises(ValueError, match="no op named"):
        lx.debug.explain_op("aten::no_such_op")
    with pytest.raises(ValueError, match="no overload 'Nope'"):
        lx.debug.explain_op("aten::add.Nope")


def test_record_holds_every_fact():
    rec = ops.record(aten.pow.Tensor_Scalar)
    assert rec.lowering is LOWERINGS[aten.pow.Tensor_Scalar]
    assert rec.static_scalars == ("exponent",)
    assert rec.eager_check is not None and rec.autocast == "fp32"
    assert ops.record(aten.slice.Tensor).view_inverse is not None
    assert ops.record(aten._foreach_norm.Scalar).foreach_target is aten.linalg_vector_norm.default
    assert ops.record(aten.copy_.default).special is not None
    assert ops.record(aten.geqrf.default).meta is not None


def test_second_rule_for_one_op_is_refused():
    with pytest.raises(RuntimeError, match="two lowering facts"):
        register(aten.addmm.default)(lambda ctx, *a: None)
    assert ops.record(aten.addmm.default).lowering.__name__ == "_addmm"


def test_views_are_read_only():
    with pytest.raises(TypeError):
        LOWERINGS[aten.addmm.default] = None  # type: ignore[index]
    with pytest.raises(ValueError, match="unknown op fact"):
        ops.register_fact(aten.addmm.default, "lowring", None)
