"""Provenance (lx.debug.set_provenance, LAZYXLA_PROVENANCE): IR nodes carry the user's
file:line, shown in recompile warnings, lowering errors and ir_text; off, nodes carry none."""
from __future__ import annotations

import inspect
import warnings

import pytest
import torch

import lazyxla as lx
from lazyxla import config
from lazyxla.frontend.provenance import origin_of
from lazyxla.ir.ops import overriding

aten = torch.ops.aten
HERE = __file__


def _line() -> int:
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


@pytest.fixture
def provenance():
    lx.debug.set_provenance(True)
    yield
    lx.debug.set_provenance(False)


def test_recompile_warning_names_the_users_line(dev, provenance, fresh_compile_cache):
    w = torch.randn(4, 4).to(dev)
    x = torch.randn(4, 4).to(dev)
    y = (x @ w).relu(); line = _line()   # noqa: E702  (the line the warning must name)
    lx.sync()
    x = torch.randn(8, 4).to(dev)
    y = (x @ w).relu(); line = _line()   # noqa: E702
    with config.override(explain_recompiles=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lx.sync()
    messages = [str(c.message) for c in caught if "compiling graph" in str(c.message)]
    assert messages and f"{HERE}:{line}" in messages[0], messages
    assert y.shape == (8, 4)


def test_ir_text_and_nodes_carry_the_origin(dev, provenance):
    x = torch.randn(3).to(dev)
    y = torch.cos(x) * 2; line = _line()   # noqa: E702
    assert origin_of(y._st.value) == f"{HERE}:{line}"
    assert f"# {HERE}:{line}" in lx.debug.ir_text([y])
    torch.testing.assert_close(y.cpu(), torch.cos(x.cpu()) * 2)


def test_lowering_error_names_the_users_line(dev, provenance):
    with overriding(aten.cosh.default, "lowering", lambda ctx, *a, **k: 1 / 0):
        x = torch.ones(5).to(dev)
        bad = torch.cosh(x); line = _line()   # noqa: E702
        with pytest.raises(lx.LoweringError, match=f"made at {HERE}:{line}"):
            lx.sync_tensors([bad])
        del bad


def test_origin_is_not_part_of_the_graph_key(dev, provenance, fresh_compile_cache):
    x = torch.randn(6).to(dev)
    lx.sync()
    a = x.sin() + 1
    lx.sync()
    compiled = lx.metrics.counter_value("UncachedCompile")
    b = x.sin() + 1   # the same program from another line: the cached graph runs
    lx.sync()
    assert lx.metrics.counter_value("UncachedCompile") == compiled
    torch.testing.assert_close(a.cpu(), b.cpu())


def test_off_by_default_records_nothing(dev):
    assert not config.SETTINGS.provenance
    x = torch.randn(3).to(dev)
    y = x + 1
    assert origin_of(y._st.value) is None and "#" not in lx.debug.ir_text([y])


def test_nodes_pending_before_it_was_switched_on_stay_unknown(dev):
    x = torch.randn(3).to(dev)
    y = x * 3
    lx.debug.set_provenance(True)
    try:
        z = y + 1; line = _line()   # noqa: E702
    finally:
        lx.debug.set_provenance(False)
    assert origin_of(z._st.value) == f"{HERE}:{line}"
    assert origin_of(y._st.value) is None
