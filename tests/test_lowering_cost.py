"""What lowering a graph costs, checked as structure, never as time (issue #22, item 4).

A graph's program is traced once per compile. Rules that call jnp's jitted helpers
trace each helper as a function of its own, and helpers jitted without inlining
(`jnp.where`, `jnp.clip`, ...) become called functions in the lowered module; W4's
2000-op graph spent most of its tracing there. lower/_util.py emits lax primitives
instead, and packed scalars are converted and split once per pack (lower/_packs.py).
These tests pin the results: one function in the module, a few primitives per node.
"""
from __future__ import annotations

import gc

import jax
import torch

import lazyxla as lx
from lazyxla._jax import jax_dtype
from lazyxla.compile import cache
from lazyxla.compile.program import build
from lazyxla.ir.scalars import scalar_avals
from lazyxla.patches import in_x64
from lazyxla.sync.api import pending_graphs

from helpers import assert_close

# W4's chain (lazyxla/bench/torch_loops.py): three of four ops take a fresh Python scalar
_CHAIN = (lambda t: t * 0.5, lambda t: t + 1.0, torch.neg, lambda t: t - 0.25)


def _traced(graph):
    """The graph's program traced to a jaxpr, as compile/cache.py traces it."""
    program, _ = build(graph)
    avals = [jax.ShapeDtypeStruct(d.shape, jax_dtype(d.dtype)) for d in graph.params]
    avals += [jax.ShapeDtypeStruct(shape, dt) for shape, dt in scalar_avals(graph)]
    return jax.jit(program, keep_unused=True).trace(*avals)


def _chain(x: torch.Tensor, n: int) -> torch.Tensor:
    for k in range(n):
        x = _CHAIN[k % 4](x)
    return x


def _pending_graph():
    (graph, _), = pending_graphs()
    return graph


def _structure(graph) -> tuple[int, int, str]:
    """(primitives in the jaxpr, nested calls in the jaxpr, lowered module text)."""
    with in_x64():
        traced = _traced(graph)
        nested = sum(1 for e in traced.jaxpr.eqns if e.primitive.name in ("pjit", "jit", "closed_call"))
        return len(traced.jaxpr.eqns), nested, traced.lower().as_text()


def _check_chain(dev, n: int, packed: bool) -> None:
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    y = _chain(x.to(dev), n)
    graph = _pending_graph()
    eqns, nested, text = _structure(graph)
    assert nested == 0
    assert text.count("func.func") == 1, "a rule calls a jitted helper: it is a function of its own"
    assert "call @" not in text
    # one primitive per op and one per scalar: its conversion to float32 when separate;
    # when packed, its reshape out of the pack, which is converted and split once
    assert eqns <= n + len(graph.scalars) + (2 if packed else 0), eqns
    assert_close(y, _chain(x, n))


def test_a_200_op_chain_with_separate_scalars_lowers_flat(dev, monkeypatch):
    from lazyxla.runtime import backend
    monkeypatch.setattr(backend.current(), "pack_scalars", False)   # CPU's policy; a TPU packs every graph's
    _check_chain(dev, 200, packed=False)   # 150 scalars: separate operands


def test_a_400_op_chain_with_packed_scalars_lowers_flat(dev):
    _check_chain(dev, 400, packed=True)   # 300 scalars: one float64 pack, converted and split once


def test_packed_scalars_reach_each_rule_in_its_own_compute_dtype(dev):
    # 500 scalars (about 400 distinct) for 4 outputs: packed; float64, bfloat16 (computed in float32) and
    # int64 consumers read the same float64 and int64 packs converted to their dtype
    a, b, i = (torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(2)),
               torch.randn(5, generator=torch.Generator().manual_seed(3)).bfloat16(), torch.arange(5))

    def f(a, b, i):
        for k in range(100):   # values that differ per k: equal ones would share an operand
            a = a * (1.0001 + k * 1e-6) + 0.1 * k
            b = b * (0.99 - k * 1e-3) - (0.5 + k)
            i = i + 3 * k
        return a, b, i, (i * 0.5 - 2.25) / 3

    got = f(a.to(dev), b.to(dev), i.to(dev))
    graph = _pending_graph()
    assert len(scalar_avals(graph)) == 2   # packed: one operand per kind present (float64, int64)
    assert_close(got, f(a, b, i))


def test_common_pointwise_rules_lower_without_nested_functions(dev):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    m = x > 0.3

    def f(t, mask):
        ys = [t + 2, t - t * 3, 2.5 - t, t * t, t / 3, -t, t.exp(), t.abs().sqrt(), t.tanh(),
              torch.where(mask, t, -t), t.masked_fill(mask, 0.25), t.clamp(-0.5, 0.5),
              t.clamp_min(0.1), torch.nn.functional.hardtanh(t), torch.nn.functional.leaky_relu(t),
              torch.nn.functional.relu(t), torch.nn.functional.threshold(t, 0.1, 2.0),
              t.maximum(-t), t < 0.2, t.eq(t), t.int() + 1]
        return ys

    got = f(x.to(dev), m.to(dev))
    eqns, nested, text = _structure(_pending_graph())
    assert nested == 0 and "call @" not in text, text[:2000]
    assert_close(got, f(x, m))


def test_compiling_leaves_the_collector_as_it_was(dev):
    x = torch.ones(3).to(dev)
    lx.sync()
    gc.disable()
    try:
        (x * 3.0).sum().item()
        assert not gc.isenabled()
    finally:
        gc.enable()
    (x * 5.0).sum().item()
    assert gc.isenabled()
    assert cache._gc_state["pauses"] == 0
