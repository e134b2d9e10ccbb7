"""Every backend's policy code, run on the CPU (runtime/backend/): the one place that says
what differs per platform. The TPU and GPU backends are selected here over JAX's CPU
devices; what they choose must still compute eager PyTorch's values."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import lazyxla as lx
from lazyxla import config, metrics
from lazyxla.ir import scalars
from lazyxla.memory_report import _roles
from lazyxla.runtime import backend, collector
from lazyxla.sync.api import pending_graphs

from helpers import assert_close, backend_as


def test_the_platform_is_read_once_and_named_by_the_backend():
    import jax
    platform = jax.devices()[0].platform
    assert lx.platform() == backend.current().platform == platform
    expected = {"cpu": backend.CpuBackend, "tpu": backend.TpuBackend, "gpu": backend.GpuBackend}[platform]
    assert type(backend.current()) is expected


@pytest.mark.parametrize("platform, packed", [("cpu", False), ("tpu", True), ("gpu", True)])
def test_scalars_travel_packed_on_accelerators(dev, platform, packed):
    # on an accelerator each operand from the host is a transfer of its own: one vector per kind
    x = torch.randn(5)
    t = x.to(dev)
    lx.sync()
    with backend_as(platform):
        t = t * 0.5 + 2
        t = t - 3
        (graph, _), = pending_graphs()
        assert graph.packed_scalars is packed
        avals = scalars.scalar_avals(graph)
        kinds = sorted({scalars.scalar_kind(s) for s in graph.scalars})
        if packed:   # one vector per kind present (float, int), holding every scalar; on the
            # TPU in 32 bits, as its storage policy holds 64-bit types
            wide = platform != "tpu"
            assert [dt for _, dt in avals] == [scalars.travel_dtypes(graph)[k] for k in kinds] \
                == ([np.float64, np.int64] if wide else [np.float32, np.int32])
            assert sum(shape[0] for shape, _ in avals) == len(graph.scalars) >= 3
        else:
            assert [shape for shape, _ in avals] == [()] * len(graph.scalars)
        assert_close(t, x * 0.5 + 2 - 3)


def test_a_packed_step_compiles_once(dev):
    # the values travel in the pack: a new learning rate is a new value, not a new program
    w = torch.ones(4).to(dev)
    lx.sync()
    expected = torch.ones(4)
    with backend_as("tpu"):
        for step in range(4):
            lr = 0.1 * (step + 1)
            w.mul_(1 - lr).add_(lr)
            expected = expected * (1 - lr) + lr
            lx.sync()
            if step == 0:
                metrics.clear_all()
    assert metrics.counter_value("UncachedCompile") in (None, 0)
    assert_close(w, expected)


def test_backends_keep_their_compiled_programs_apart(dev):
    # another backend's options may differ: its compile token is in every cache key
    from lazyxla.compile import cache
    with config.override(split_temporaries=True):
        cpu = backend.select("cpu")
        with backend_as("tpu") as tpu:
            assert tpu.compile_token == () and tpu.compiler_options(False) == {}
            # the TPU expands barriers itself; keeping them refused the graph (issue 45)
            assert tpu.compiler_options(True) == {}
        assert cpu.compiler_options(True)["xla_disable_hlo_passes"] == "cse_barrier_expander"
        assert cache.compiler_options.__module__ == "lazyxla.compile.cache"
        assert cpu.compiler_options(False) == dict(cpu.compile_token)


def test_attention_implementation_is_the_backends_choice():
    with backend_as("gpu") as gpu:
        assert gpu.attention_implementation(torch.bfloat16) == "cudnn"
        assert gpu.attention_implementation(torch.float32) == "xla"
    with backend_as("tpu") as tpu:
        assert tpu.attention_implementation(torch.bfloat16) == "xla"
    assert backend.current().attention_implementation(torch.float16) == "xla"


def test_memory_limit_is_the_hosts_on_cpu_and_the_allocators_elsewhere(monkeypatch):
    import os
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert backend.current().memory_limit(0) == physical
    assert backend.current().memory_stats(0) is None
    with backend_as("tpu") as tpu:
        monkeypatch.setattr(type(tpu), "memory_stats", lambda self, device: {"bytes_limit": 16 * 2**30})
        assert tpu.memory_limit(0) == 16 * 2**30


def _train_small(dev, steps: int) -> list:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    x, y = torch.randn(4, 8).to(dev), torch.randn(4, 1).to(dev)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss)
    return [float(l.item()) for l in losses]


@pytest.fixture
def fresh_collector():
    collector.release()
    yield
    collector.release()


def test_the_collector_stays_out_of_steady_steps(dev, fresh_collector):
    # after the warm-up, no automatic collection at all, and no generation 1 or 2 in 50 steps:
    # the young generation is collected at the barriers
    assert gc.isenabled()
    _train_small(dev, collector.CollectorPolicy().warmup_barriers + 2)
    assert collector.is_managed()
    seen = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])
    gc.callbacks.append(record)
    try:
        _train_small(dev, 50)
    finally:
        gc.callbacks.remove(record)
    assert not [g for g in seen if g > 0]


def test_the_collector_still_frees_cycles_each_step(dev, fresh_collector):
    import weakref

    class Cyclic:
        pass
    _train_small(dev, collector.CollectorPolicy().warmup_barriers + 1)
    assert collector.is_managed()
    obj = Cyclic()
    obj.me = obj
    alive = weakref.ref(obj)
    del obj
    kept = [Cyclic() for _ in range(collector.CollectorPolicy().young_minimum)]   # a step's new objects
    lx.sync()
    assert alive() is None and len(kept)


def test_the_memory_report_finds_a_frozen_model_and_optimizer(dev, fresh_collector):
    # the model and optimizer made before the collector froze them still have their roles
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32).to(dev)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(4, 64).to(dev)
    for _ in range(collector.CollectorPolicy().warmup_barriers + 1):
        opt.zero_grad(set_to_none=False)
        model(x).sum().backward()
        opt.step()
    lx.sync()
    assert collector.is_managed() and gc.get_freeze_count() > 0
    roles = lx.debug.memory_report().by_role
    assert roles["parameters"]["buffers"] >= 2 and roles["gradients"]["buffers"] >= 2
    assert roles["optimizer state"]["buffers"] >= 4   # exp_avg, exp_avg_sq of each
    # this model's own buffers by role (tensors of earlier tests in the process may still live)
    found, _ = _roles()
    buffer = lambda t: id(t._st.value.data)   # noqa: E731
    assert [found.get(buffer(p)) for p in model.parameters()] == ["parameters"] * 2
    assert [found.get(buffer(p.grad)) for p in model.parameters()] == ["gradients"] * 2
    assert {found.get(buffer(v)) for s in opt.state.values() for v in s.values()
            if v.device == dev} == {"optimizer state"}   # (AdamW's `step` counts stay on the CPU)
    assert gc.get_freeze_count() > 0   # still managed: frozen again after the walk


def test_garbage_alive_at_the_freeze_is_collected_not_frozen(dev, fresh_collector):
    # A model left in a reference cycle before management starts would otherwise be frozen
    # with its device buffers for the rest of the process.
    class Holder:
        pass
    thresholds = gc.get_threshold()
    gc.disable()   # no automatic collection may free the cycle before the freeze does
    try:
        holder = Holder()
        holder.me, holder.model = holder, torch.nn.Linear(8, 8).to(dev)
        lx.sync()
        gone = weakref.ref(holder.model.weight)
        del holder
        gc.enable()
        gc.set_threshold(10**9)   # and none until the barrier's own
        _train_small(dev, collector.CollectorPolicy().warmup_barriers + 1)
        assert collector.is_managed() and gone() is None
    finally:
        gc.enable()
        collector.release()
        gc.set_threshold(*thresholds)


def test_the_switch_restores_the_collector(dev, fresh_collector):
    before = gc.get_threshold()
    _train_small(dev, collector.CollectorPolicy().warmup_barriers + 1)
    assert collector.is_managed() and gc.get_threshold()[0] == collector.CollectorPolicy().young_threshold
    assert gc.get_freeze_count() > 0
    with config.override(gc_management=False):
        lx.sync()
        assert not collector.is_managed()
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_collections_are_counted(dev, fresh_collector):
    metrics.clear_all()
    gc.collect(0)
    lx.sync()
    assert metrics.counter_value("GcCollections") >= 1
    assert metrics.metric_data("GcTime")[0] >= 1


def test_a_program_that_disabled_the_collector_keeps_it_off(dev, fresh_collector):
    gc.disable()
    try:
        _train_small(dev, collector.CollectorPolicy().warmup_barriers + 2)
        assert not collector.is_managed() and not gc.isenabled()
    finally:
        gc.enable()


def test_memory_figures_read_the_chips_allocator_where_it_reports(dev, monkeypatch):
    # on a TPU or GPU, lx.memory_info() and lx.debug.memory_report() show the allocator's own figures
    stats = {"bytes_in_use": 3 * 2**20, "peak_bytes_in_use": 5 * 2**20, "bytes_limit": 16 * 2**30}
    with backend_as("tpu") as tpu:
        monkeypatch.setattr(type(tpu), "memory_stats", lambda self, device: dict(stats))
        info = lx.memory_info()
        assert info["backend"] == stats
        report = str(lx.debug.memory_report())
        assert "the device's allocator: 3.00 MB in use, peak 5.00 MB, limit 16,384.00 MB" in report
    assert "the device's allocator" not in str(lx.debug.memory_report())   # CPU: the ledger only


def test_where_a_small_read_runs_is_the_backends_unless_set(dev, host_replay):
    """The host-read policies come from the backend; LAZYXLA_HOST_READ_MAX_ELEMENTS and
    LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS override them (0: off)."""
    for platform in ("cpu", "tpu", "gpu"):
        with backend_as(platform):
            assert backend.setting("host_read_max_elements") == backend.current().host_read_max_elements > 0
            assert backend.setting("host_bookkeeping_max_elements") > 0
    x = torch.tensor([3.0]).to(dev)
    metrics.clear_all()
    assert (x * 2).item() == 6.0   # a one-element read: replayed on the host by the backend's policy
    assert metrics.counter_value("HostEvaluatedRead") == 1
    with config.override(host_read_max_elements=0):
        assert backend.setting("host_read_max_elements") == 0
        assert (x * 3).item() == 9.0
        assert metrics.counter_value("HostEvaluatedRead") == 1   # ran on the device this time
    assert config.from_env({"LAZYXLA_HOST_READ_MAX_ELEMENTS": "12"}).host_read_max_elements == 12
    assert config.from_env({}).host_read_max_elements is None   # unset: the backend's


def test_the_collectors_hook_comes_with_the_first_device_use_and_goes_on_request(dev):
    # `import lazyxla` registers and nothing else: gc.callbacks holds no lazyxla hook until
    # a backend starts; then collections are counted, until `unwatch`
    import subprocess
    import sys
    from helpers import child_env
    script = ("import gc, lazyxla\n"
              "assert not [c for c in gc.callbacks if c.__module__.startswith('lazyxla')], gc.callbacks\n"
              "lazyxla.platform()\n"
              "assert [c for c in gc.callbacks if c.__module__.startswith('lazyxla')], gc.callbacks\n"
              "print('OK')\n")
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
    assert collector._count in gc.callbacks
    collector.unwatch()
    try:
        before = metrics.counter_value("GcCollections") or 0
        gc.collect()
        assert (metrics.counter_value("GcCollections") or 0) == before
    finally:
        collector.watch()
    gc.collect()
    assert metrics.counter_value("GcCollections") >= before + 1
