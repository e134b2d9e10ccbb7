"""Compile lazyxla's graphs for a TPU v5e without one: libtpu's compile-only client.

JAX can describe a TPU topology and compile for it on any host that has libtpu, no chip
needed (`jax.experimental.topologies`). The TPU compiler then runs here in full, so a graph
that the TPU refuses ("HLO opt-barrier is not implemented on TPU", issue 45) fails here the
same way, and `memory_analysis()` gives the TPU's figures. Nothing runs.

libtpu: the wheel `jax[tpu]` pins (libtpu 0.0.42.* for JAX 0.10.2); unzip its libtpu.so and
point TPU_LIBRARY_PATH at it, or pip-install the wheel in a folder of its own (installing it
beside JAX would make JAX look for a chip at start). Keep JAX_PLATFORMS=cpu: lazyxla runs on
the CPU as usual and every graph it compiles is also compiled for the TPU.

Two uses:
  python scripts/tpu/aot_compile.py            # the barrier forms, and W2's step (with
                                               # checkpointing): compile or not, TPU memory
  python -m pytest -p aot_compile tests/...    # with scripts/tpu on PYTHONPATH: every graph
                                               # the tests compile, also for the TPU; those
                                               # the TPU refuses go to $AOT_TPU_REPORT
                                               # (where libtpu aborts the process, the
                                               # graph is in $AOT_TPU_REPORT.current)
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Optional

import jax
from jax.sharding import SingleDeviceSharding

from lazyxla.compile import cache, precision
from lazyxla.compile.program import build
from lazyxla.ir.graph import Graph
from lazyxla.ir.node import OPT_BARRIER
from lazyxla.patches import in_x64
from lazyxla.runtime.backend import TpuBackend


@functools.lru_cache(maxsize=None)
def tpu_device():
    """The one chip of a compile-only TPU v5e topology."""
    from jax.experimental import topologies
    topology = topologies.get_topology_desc(platform="tpu", topology_name="v5e:1x1",
                                            chip_config_name="default", chips_per_host_bounds=(1, 1, 1),
                                            num_slices=1)
    return topology.devices[0]


def compile_for_tpu(graph: Graph, donors: tuple):
    """`graph` compiled as lazyxla would compile it on a TPU: its program, avals placed on
    the compile-only chip, the TPU backend's compiler options. Raises what the TPU compiler
    raises. One difference: lifted scalars stay as the CPU collected them, one operand each
    (a TPU's graph packs them in one vector per kind, runtime/backend/)."""
    jitted = cache._Jitted.of(graph, donors)   # its avals; its outputs are placed on the CPU
    sharding = SingleDeviceSharding(tpu_device())
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in jitted.avals]
    fn = jax.jit(build(graph)[0], donate_argnums=donors, keep_unused=True)
    with in_x64(), precision.lowering(graph.matmul_precision):
        lowered = fn.trace(*avals).lower()
    has_barriers = any(node.op is OPT_BARRIER for node in graph.order)
    with in_x64():
        return lowered.compile(TpuBackend().compiler_options(has_barriers) or None)


# -- the pytest plugin: every graph a test compiles, also for the TPU -------------------

_refused: list = []
_current = ["?"]


def _also_for_tpu(compile_graph):
    @functools.wraps(compile_graph)
    def compile_both(graph: Graph, donors: tuple, metric: str = "CompileTime"):
        executable = compile_graph(graph, donors, metric)
        if graph.out_shardings is None:   # single-device graphs: SPMD ones need a mesh of chips
            ops = " ".join(sorted({str(n.op) for n in graph.order}))[:2000]
            # the graph being compiled, for when libtpu aborts the process
            with open(_report_path() + ".current", "w") as f:
                f.write(f"{_current[0]}\t{ops}\n")
            try:
                compile_for_tpu(graph, donors)
            except Exception as e:   # noqa: BLE001  (recorded: what the TPU refuses is the finding)
                _refused.append((_current[0], str(e).splitlines()[0][:300], ops))
        return executable
    return compile_both


def pytest_configure(config) -> None:
    cache._compile = _also_for_tpu(cache._compile)


def pytest_runtest_setup(item) -> None:
    _current[0] = item.nodeid


def _report_path() -> str:
    return os.environ.get("AOT_TPU_REPORT", "aot_tpu_report.tsv")


def pytest_sessionfinish(session) -> None:
    path = _report_path()
    with open(path, "w") as f:
        for row in _refused:
            f.write("\t".join(row) + "\n")
    print(f"\naot_compile: {len(_refused)} graph(s) the TPU refuses; see {path}", file=sys.stderr)


# -- the script: barrier forms and W2's step -------------------------------------------

def _pending_graph(tensors=None) -> tuple:
    from lazyxla.sync.api import pending_graphs
    (graph, donors), = pending_graphs(tensors)
    return graph, donors


def _report(name: str, graph: Graph, donors: tuple) -> Optional[object]:
    try:
        compiled = compile_for_tpu(graph, donors)
    except Exception as e:   # noqa: BLE001
        print(f"FAIL {name}: {str(e).splitlines()[0][:200]}")
        return None
    memory = compiled.memory_analysis()
    print(f"PASS {name}: TPU temporaries {memory.temp_size_in_bytes / 2**20:.1f} MiB")
    return compiled


def main() -> int:
    import torch
    import lazyxla as lx
    from lazyxla import workloads
    dev = lx.device()
    failures = 0
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.float64, torch.bool,
                  torch.complex64, torch.uint8):
        a = torch.ones(3, 4, dtype=dtype).to(dev)
        b = torch.ones(3, 4, dtype=dtype).to(dev)
        lx.sync()
        a.add_(1) if dtype is not torch.bool else a.logical_not_()
        lx.optimization_barrier_([a, b])
        failures += _report(f"barrier over {dtype}", *_pending_graph([a, b])) is None
        lx.sync()
    for checkpoint in (False, True):
        w = workloads.make("gpt")
        model = workloads.GPT(workloads.GPTConfig(checkpoint=checkpoint)).to(dev)
        model.load_state_dict(w.model.state_dict())
        loss = w.loss(model, w.inputs.to(dev), w.targets.to(dev))
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        failures += _report(f"W2 forward+backward, checkpoint={checkpoint}", *_pending_graph(grads)) is None
        lx.sync()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
