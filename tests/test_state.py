"""lazyxla/state.py: the one run-time state object. The public setters write to it,
`scoped` sets modes for a block and restores them (also on errors), values are checked."""
from __future__ import annotations

import re

import pytest
import torch

import lazyxla as lx
from lazyxla.ir.node import DATA
from lazyxla.state import MODES, STATE


def test_public_setters_write_to_the_state(dev):
    before = STATE.modes()
    try:
        lx.set_matmul_precision("high")
        lx.metrics.set_op_records(True)
        lx.experimental.eager_mode(True)
        lx.set_implied_barriers(False)
        lx.set_host_operands(True)
        lx.set_aliasing(False, device=dev)
        lx.set_explicit_donation(True)
        lx.debug.set_provenance(True)
        assert (STATE.matmul_precision, STATE.op_records, STATE.eager, STATE.implied_barriers,
                STATE.host_operands, STATE.aliasing[0], STATE.explicit_donation, STATE.provenance) == \
            ("high", True, True, False, True, False, {None: True}, True)
        assert STATE.per_op
    finally:
        for name, value in before.items():
            STATE.set(name, value)
    assert STATE.modes() == before and STATE.per_op == (before["eager"] or before["op_records"])


def test_scoped_sets_and_restores_also_on_errors(dev):
    level = lx.matmul_precision()   # an earlier test (compat's import) may have set another level
    assert not lx.experimental.is_eager_mode()
    with pytest.raises(KeyError):
        with STATE.scoped(matmul_precision="default", eager=True):
            assert lx.matmul_precision() == "default" and lx.experimental.is_eager_mode() and STATE.per_op
            y = torch.ones(2, device=dev) + 1
            assert y._st.value.op is DATA   # eager mode ran the op at once
            raise KeyError("boom")
    assert lx.matmul_precision() == level and not lx.experimental.is_eager_mode() and not STATE.per_op


def test_values_are_checked_before_anything_changes():
    before = STATE.modes()
    with pytest.raises(ValueError, match="'medium' is not one of 'default', 'high', 'highest'"):
        with STATE.scoped(eager=False, matmul_precision="medium"):
            pass
    with pytest.raises(TypeError, match="the eager mode expects True or False"):
        lx.experimental.eager_mode(1)
    with pytest.raises(AttributeError, match="not a run-time mode"):
        STATE.set("traced_since_sync", 3)   # bookkeeping, not a mode
    assert STATE.modes() == before and set(before) == set(MODES)


def test_watchers_follow_the_mode():
    seen = []
    STATE.watch("host_operands", seen.append)
    try:
        with STATE.scoped(host_operands=True):
            pass
    finally:
        STATE._watchers["host_operands"].remove(seen.append)
    assert seen == [True, False]


def test_matmul_precision_reaches_the_rules_through_the_lowering_context(dev):
    """No global: the graph's level rides on its Graph and each rule's Ctx."""
    a, b = torch.randn(4, 4).to(dev), torch.randn(4, 4).to(dev)
    with STATE.scoped(matmul_precision="high"):
        c = a @ b
        text = lx.debug.hlo_text([c])
    assert re.findall(r"operand_precision=\{(\w+),", text) == ["high"]
    assert re.findall(r"operand_precision=\{(\w+),", lx.debug.hlo_text([a @ b])) == ["highest"]
