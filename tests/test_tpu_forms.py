"""Forms the TPU needs, checked on the CPU (issue 45).

- Optimization barriers are kept to the end by an option on XLA:CPU only (runtime/backend/,
  tests/test_backends.py): the TPU must expand them itself, its emitter has no opt-barrier
  ("HLO opt-barrier is not implemented on TPU").
- No complex128 <-> complex64 convert (the TPU compiler aborts the process on one): complex
  Python scalars are read as complex64 in complex64 graphs, other such casts go part by part.

With libtpu at hand (TPU_LIBRARY_PATH, scripts/tpu/aot_compile.py) the graphs are also
compiled for a TPU v5e, no chip needed."""
from __future__ import annotations

import os
import re

import pytest
import torch

import lazyxla as lx
from lazyxla.sync.api import pending_graphs

from helpers import assert_close, backend_as, skip_if_narrowed

needs_libtpu = pytest.mark.skipif(not os.environ.get("TPU_LIBRARY_PATH"),
                                  reason="needs libtpu (TPU_LIBRARY_PATH) for its compile-only TPU client")


def _barrier_graph(dev):
    a, b = torch.randn(3, 4).to(dev), torch.randn(3, 4).to(dev)
    lx.sync()
    a.add_(1)
    b.mul_(2)
    lx.optimization_barrier_([a, b])
    a.mul_(b)
    (graph, donors), = pending_graphs([a, b])
    return graph, donors


def _complex_converts(hlo: str) -> list:
    """HLO converts from one complex type to another."""
    return re.findall(r"= c\d+\[[^\]]*\]\S* convert\(c\d+", hlo)


def _complex_scalar_graph(dev):
    z = torch.randn(3, 4, dtype=torch.complex64)
    lazy = z.to(dev)
    lx.sync()
    return z, [lazy * 2j, torch.full_like(lazy, 1.5 - 2j), lazy.real * 1j]


@pytest.mark.parametrize("platform", ["cpu", "tpu"])   # scalars one operand each, packed
def test_complex_scalars_and_casts_have_no_complex_converts(dev, platform):
    with backend_as(platform):
        z, results = _complex_scalar_graph(dev)
        hlo = lx.debug.hlo_text(results)
    # the scalars enter as complex128, or as complex64 under the TPU's 64-bit rule
    assert ("c128[" in hlo) == (platform == "cpu") and _complex_converts(hlo) == []
    for got, expected in zip(results, [z * 2j, torch.full_like(z, 1.5 - 2j), z.real * 1j]):
        assert got.dtype == expected.dtype
        assert_close(got, expected)
    wide = results[0].to(torch.complex128)
    assert _complex_converts(lx.debug.hlo_text([wide])) == []
    assert torch.equal(wide.cpu(), (z * 2j).to(torch.complex128))


def test_complex_scalars_stay_complex128_beside_complex128_tensors(dev):
    skip_if_narrowed(torch.complex128)
    z = torch.randn(3, dtype=torch.complex128)
    w = z.to(dev) * (1 / 3 + 1j)   # eager computes this in complex128: the scalar keeps its bits
    assert re.search(r"multiply\(c128", lx.debug.hlo_text([w]))
    assert torch.equal(w.cpu(), z * (1 / 3 + 1j))


def _tpu_compile(graph_of):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts", "tpu"))
    from aot_compile import compile_for_tpu
    (graph, donors), = graph_of
    compile_for_tpu(graph, donors)


@needs_libtpu
def test_barrier_graph_compiles_for_a_tpu(dev):
    graph, donors = _barrier_graph(dev)
    _tpu_compile([(graph, donors)])
    lx.sync()


@needs_libtpu
def test_complex_scalar_graph_compiles_for_a_tpu(dev):
    _, results = _complex_scalar_graph(dev)
    _tpu_compile(pending_graphs(results))
