"""The tracer's memo tables are bounded: the meta cache and the signature tables forget
their oldest half past a cap, and what they forget is rebuilt, never confused."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from lazyxla.frontend import tracing
from lazyxla.ir import build as ir_build
from lazyxla.ir import node as ir_node
from lazyxla.ir.bounded import BoundedTable


def test_bounded_table_forgets_the_oldest_half():
    table = BoundedTable(4)
    for i in range(4):
        table.put(i, str(i))
    assert list(table) == [0, 1, 2, 3]
    assert table.put(4, "4") == "4"
    assert list(table) == [2, 3, 4]
    for i in range(5, 100):
        table.put(i, i)
        assert len(table) <= 4


def test_bounded_table_refuses_a_tiny_cap():
    with pytest.raises(ValueError, match="cap of at least 2"):
        BoundedTable(1)


def test_the_real_tables_have_caps():
    assert tracing.META_CACHE.cap == tracing.META_CACHE_CAP == 65536
    assert ir_node._SIG_IDS.cap == ir_node._SIGS.cap == ir_node.SIG_TABLE_CAP == 131072
    assert ir_build._DATA_SIGS.cap <= ir_node.SIG_TABLE_CAP


@pytest.fixture
def small_tables(monkeypatch):
    """The tracer's tables with tiny caps (restored after)."""
    monkeypatch.setattr(tracing, "META_CACHE", BoundedTable(8))
    monkeypatch.setattr(ir_node, "_SIG_IDS", BoundedTable(16))
    monkeypatch.setattr(ir_node, "_SIGS", BoundedTable(16))
    monkeypatch.setattr(ir_build, "_DATA_SIGS", BoundedTable(8))


def test_many_shapes_stay_within_the_caps_and_compute_right(dev, small_tables):
    for n in range(1, 41):   # 40 shapes: every table overflows several times
        x = torch.arange(float(n)).to(dev)
        y = (x * 2 + 1).sum()
        assert y.item() == float(n * n)   # sum of 2k+1 for k < n
        assert len(tracing.META_CACHE) <= 8
        assert len(ir_node._SIG_IDS) <= 16 and len(ir_node._SIGS) <= 16 and len(ir_build._DATA_SIGS) <= 8


def test_a_forgotten_signature_gets_a_new_id(small_tables):
    first = ir_node.intern_sig(("probe", 0))
    assert ir_node.intern_sig(("probe", 0)) == first
    for i in range(1, 40):
        ir_node.intern_sig(("probe", i))
    assert ir_node.sig_of(first) is None                # forgotten
    again = ir_node.intern_sig(("probe", 0))
    assert again != first and ir_node.sig_of(again) == ("probe", 0)
    ids = [ir_node.intern_sig(("other", i)) for i in range(40)]
    assert first not in ids                             # an id is never reused


def test_recompile_explanation_survives_a_forgotten_signature(dev, small_tables, fresh_compile_cache):
    x = torch.ones(3).to(dev)
    (x + 1).cpu()
    for n in range(2, 30):
        torch.ones(n).to(dev).sum().item()
    (x * 3).cpu()
    assert lx.debug.explain_last_compile()   # a text, even where signatures were forgotten


def test_a_forgotten_graph_key_gets_an_id_no_other_key_had(monkeypatch):
    # graph keys stand in the donor plans and the compile cache by their id (ir/graph.py)
    from lazyxla.ir import graph as ir_graph
    monkeypatch.setattr(ir_graph, "_KEY_IDS", BoundedTable(2))
    a, b, c = (0, ((1, -1, 0),), (0,)), (0, ((2, -1, 0),), (0,)), (0, ((3, -1, 0),), (0,))
    first = ir_graph.key_id(a)
    assert ir_graph.key_id((0, ((1, -1, 0),), (0,))) == first   # an equal key: its id
    seen = {first, ir_graph.key_id(b), ir_graph.key_id(c)}       # c's insert forgets a
    assert len(seen) == 3
    assert ir_graph.key_id(a) not in seen
