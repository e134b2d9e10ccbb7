"""What a graph is compiled with depends on the platform (compile/cache.py compiler_options):
XLA:CPU keeps optimization barriers to the end (else CSE merges a checkpoint's re-run back
into the forward); the TPU must expand them itself, its emitter has no opt-barrier ("HLO
opt-barrier is not implemented on TPU", issue 45). With libtpu at hand (TPU_LIBRARY_PATH,
scripts/tpu/aot_compile.py) the barrier graph is also compiled for a TPU v5e, no chip needed."""
from __future__ import annotations

import os

import pytest
import torch

import lazyxla as lx
from lazyxla.compile.cache import compiler_options
from lazyxla.sync.api import pending_graphs

KEEP_BARRIERS = ("xla_disable_hlo_passes", "cse_barrier_expander")


def _barrier_graph(dev):
    a, b = torch.randn(3, 4).to(dev), torch.randn(3, 4).to(dev)
    lx.sync()
    a.add_(1)
    b.mul_(2)
    lx.optimization_barrier_([a, b])
    a.mul_(b)
    (graph, donors), = pending_graphs([a, b])
    return graph, donors


def test_barriers_are_kept_by_option_on_cpu_only(dev):
    graph, _ = _barrier_graph(dev)
    assert KEEP_BARRIERS in compiler_options(graph, "cpu").items()
    assert compiler_options(graph, "tpu") == {} and compiler_options(graph, "gpu") == {}
    lx.sync()


@pytest.mark.skipif(not os.environ.get("TPU_LIBRARY_PATH"), reason="needs libtpu (TPU_LIBRARY_PATH) for "
                    "its compile-only TPU client")
def test_barrier_graph_compiles_for_a_tpu(dev):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts", "tpu"))
    from aot_compile import compile_for_tpu
    graph, donors = _barrier_graph(dev)
    compile_for_tpu(graph, donors)
    lx.sync()
