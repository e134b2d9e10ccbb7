"""lazyxla.compat: PyTorch/XLA names mapped onto lazyxla's public API, the
unsupported-name errors, no shadowing of a real torch_xla, the CLI, and a
PyTorch/XLA-style training script against eager."""
import importlib
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import lazyxla as lx
import lazyxla.compat as compat
from helpers import assert_close, child_env, matmul_tolerance, needs_sockets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fake_real_torch_xla(tmp_path, monkeypatch):
    """A stand-in for an installed torch_xla: a package on sys.path."""
    pkg = tmp_path / "torch_xla"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield str(pkg)
    compat.uninstall()
    sys.modules.pop("torch_xla", None)


# -- mapped names ---------------------------------------------------------------------

def test_modules_and_names_are_lazyxla_public_api(torch_xla):
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.runtime as xr
    from torch_xla.experimental.gradient_accumulation import gradient_accumulation
    from torch_xla._dynamo.dynamo_bridge import alias_with_buffer_donor_config
    from torch_xla.utils.buffer_donor_context import alias_with_buffer_donor_config as ctx2

    assert torch_xla.__name__ == "lazyxla.compat.torch_xla"
    assert xm is sys.modules["torch_xla.core.xla_model"]
    assert xm is importlib.import_module("lazyxla.compat.torch_xla.core.xla_model")
    assert torch_xla.device() == xm.xla_device() == torch.device("xla", 0)   # upstream's names
    assert torch_xla.devices() == [torch.device("xla", i) for i in range(lx.device_count())]
    assert torch_xla.device_count() == lx.device_count()
    assert xr.device_type() == {"cpu": "CPU", "gpu": "CUDA", "tpu": "TPU"}[lx.platform()]
    assert (xr.world_size(), xr.global_ordinal(), xm.get_ordinal(), xm.xrt_world_size()) == (1, 0, 0, 1)
    assert xm.is_master_ordinal() and xr.process_index() == 0 and xr.process_count() == 1
    assert xr.global_runtime_device_count() == lx.device_count()
    assert gradient_accumulation.__wrapped__ is lx.experimental.gradient_accumulation
    assert alias_with_buffer_donor_config is ctx2
    assert met.clear_metrics is lx.metrics.clear_metrics
    assert torch_xla._XLAC._xla_get_default_device() == "xla:0"
    assert xm.is_xla_tensor(torch.zeros(1, device=lx.device())) and not xm.is_xla_tensor(torch.zeros(1))


def test_mutating_train_step_raises_an_assertion_error_under_the_torch_xla_name(torch_xla):
    from torch_xla.experimental.gradient_accumulation import InputMutationError, gradient_accumulation
    dev = torch_xla.device()
    model = torch.nn.Linear(3, 1).to(dev)
    xs = torch.randn(2, 4, 3).to(dev)
    before = xs.cpu()

    def train_step(x):
        x.mul_(2)
        return model(x).sum()

    with pytest.raises(AssertionError) as info:   # upstream's assert, raised so that -O keeps it
        gradient_accumulation(train_step, [xs], model)
    assert isinstance(info.value, InputMutationError)
    assert isinstance(info.value, lx.experimental.InputMutationError)
    assert xs.cpu().equal(before)


def test_upstream_device_names_mean_lazyxla_devices(torch_xla):
    # "xla" wherever torch takes a device: factories, Tensor.to, Module.to, new_*, compiled code;
    # the tensors are lazyxla's and read their device as upstream's do, "xla:0"
    xla = torch_xla.device()
    assert xla == torch.device("xla", 0)
    z = torch.zeros(2, device="xla")
    assert isinstance(z, lx.LazyTensor) and z.device == xla and z.device.type == "xla"
    assert torch.ones(2, device=torch.device("xla:0")).device == xla
    t = torch.arange(3.0).to("xla", torch.float64)
    assert isinstance(t, lx.LazyTensor) and t.device == xla and t.dtype == torch.float64
    assert t.new_zeros(2, device=t.device).device == xla   # the name read back is taken again
    model = torch.nn.Linear(3, 2).to(torch_xla.device())
    assert isinstance(model.weight, lx.LazyTensor) and model.weight.device == xla
    assert "device='xla:0'" in repr(torch.tensor([5], device="xla"))
    assert torch.get_device_module("xla") is torch.get_device_module(lx.device().type)
    compiled = torch.compile(lambda v: v + torch.ones(3, device=torch_xla.device()), backend="openxla")
    assert_close(compiled(t.float()).cpu(), torch.arange(3.0) + 1)
    assert torch.zeros(1, device="cpu").device.type == "cpu" and torch.zeros(1).to("cpu").device.type == "cpu"


def test_sync_and_metrics_names(torch_xla):
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    dev = torch_xla.device()
    t = torch.randn(4, 3).to(dev)
    expected = t.cpu() * 2
    met.clear_all()
    t *= 2
    xm.mark_step()
    torch_xla.sync()   # nothing pending: still a step barrier
    assert met.counter_value("MarkStep") == 2
    assert met.metric_data("InputOutputAliasCount")[1] == 1   # the in-place update donated
    assert "Counter: MarkStep" in met.metrics_report() and "MarkStep" in met.counter_names()
    assert "MarkStep" in met.short_metrics_report()
    assert_close(t, expected)


def test_upstream_counters_metrics_and_fallback_ops(torch_xla):
    import torch_xla.debug.metrics as met
    assert lx.metrics.op_records_enabled()   # upstream counts every op
    met.clear_all()
    t = torch.tensor([2.0, 3.0], device="xla")
    assert met.counter_value("CreateXlaTensor") == 1
    assert "TensorToData" in met.metric_names()   # lazyxla's TransferToDeviceTime
    assert met.metric_data("TensorToData") == lx.metrics.metric_data("TransferToDeviceTime")
    report = met.metrics_report()
    assert "Metric: TensorToData\n  TotalSamples: 1" in report and "Metric: TransferToDeviceTime" in report
    assert "TensorToData" not in met.short_metrics_report()
    assert "Metric: TensorToData" in met.short_metrics_report(metric_names=["TensorToData"])
    t += 2
    assert met.counter_value("xla::add_") == 1 and "xla::add_" in met.metrics_report()
    assert met.executed_fallback_ops() == []
    assert t.sum().item() == 9.0
    assert met.executed_fallback_ops() == ["aten::_local_scalar_dense"]
    created = met.counter_value("CreateXlaTensor")
    torch_xla._XLAC._xla_increment_counter("CreateXlaTensor", 3)
    torch_xla._XLAC._xla_increment_counter("FakeCounter", 2)
    assert met.counter_value("CreateXlaTensor") == created + 3 and met.counter_value("FakeCounter") == 2
    assert lx.metrics.counter_value("FakeCounter") is None   # lazyxla's own counters unchanged
    assert "Counter: FakeCounter\n  Value: 2" in met.metrics_report()
    met.clear_counters()
    assert met.counter_names() == [] and met.counter_value("FakeCounter") is None


def test_eager_mode_and_upstream_execute_semantics(torch_xla):
    import torch_xla.debug.metrics as met
    assert torch_xla.experimental.eager_mode is lx.experimental.eager_mode
    with torch_xla.experimental.eager_mode_context(True):
        assert torch_xla.experimental.is_eager_mode()
        met.clear_all()
        t = torch.tensor(5.0, device="xla") * 2
        torch_xla.sync()   # nothing left to run
        assert met.metric_data("EagerOpExecuteTime")[0] == 2 and "ExecuteTime" not in met.metric_names()
    assert not lx.experimental.is_eager_mode()
    met.clear_all()
    y = t * 3
    torch_xla.sync()
    # upstream's ExecuteTime is the run until the outputs are ready: lazyxla's ExecuteReadyTime
    assert met.metric_data("ExecuteTime") == lx.metrics.metric_data("ExecuteReadyTime")
    report = met.metrics_report()
    assert report.count("Metric: ExecuteTime\n") == 1 and "Metric: ExecuteReadyTime" in report
    assert "Metric: ExecuteTime" in met.short_metrics_report()
    # no device-data cache: each scalar a run sends is upstream's cache miss
    assert met.counter_value("DeviceDataCacheMiss") == lx.metrics.counter_value("UploadedScalars") == 1
    assert "Counter: DeviceDataCacheMiss\n  Value: 1" in report
    assert y.item() == 30.0


def test_optimizer_step_and_step_closures(torch_xla):
    import torch_xla.core.xla_model as xm
    dev = torch_xla.device()
    w = torch.nn.Parameter(torch.ones(3).to(dev))
    opt = torch.optim.SGD([w], lr=0.5)
    (w * torch.arange(3.0).to(dev)).sum().backward()
    seen = []
    xm.add_step_closure(lambda v: seen.append(v.cpu()), args=(w,))
    before = lx.metrics.counter_value("MarkStep") or 0
    xm.optimizer_step(opt, barrier=True)
    assert lx.metrics.counter_value("MarkStep") == before + 1
    assert len(seen) == 1   # ran after the barrier, once
    assert_close(seen[0], torch.tensor([1.0, 0.5, 0.0]))
    xm.mark_step()
    assert len(seen) == 1


def test_donation_bindings(torch_xla):
    X = torch_xla._XLAC
    dev = torch_xla.device()
    t0 = torch.randn(4).to(dev)
    t1 = t0 + 1
    assert X._set_buffer_donation(t0, True) and X._get_buffer_donation(t0)
    assert not X._set_buffer_donation(t1, True)   # pending computation
    assert not X._xla_get_enable_alias_with_buffer_donor_config()
    X._xla_set_enable_alias_with_buffer_donor_config(True)
    assert lx.explicit_donation_enabled() and X._xla_get_enable_alias_with_buffer_donor_config("lazyxla:0")
    lx.metrics.clear_all()
    X._xla_sync_multi([t1], [], True, False)   # explicit donation now applies at partial syncs
    assert X._is_placecholder(t0) and lx.is_donated(t0)
    assert "Data Handle: Deleted" in X._get_xla_tensor_debug_info(t0)
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 1


def test_partial_sync_never_donates_a_needed_buffer(torch_xla):
    """Upstream's _xla_sync_multi(..., sync_xla_data=True) of a partial set donates an
    in-place-updated buffer that another pending tensor still reads (SPEC §3.6);
    lazyxla keeps it."""
    dev = torch_xla.device()
    t0 = torch.tensor([1.0]).to(dev)
    t1 = torch.tensor([2.0]).to(dev)
    t2 = t0 + t1
    t1.add_(1)
    lx.metrics.clear_all()
    torch_xla._XLAC._xla_sync_multi([t1], [], True, True)
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 0
    torch_xla.sync()
    assert t2.item() == 3.0 and t1.item() == 3.0


def test_graph_hash_binding_includes_explicit_donors_only_when_enabled(torch_xla):
    X = torch_xla._XLAC
    x = torch.randn(5).to(torch_xla.device())
    res = torch.cos(x)
    plain = X._get_graph_hash([res])
    assert isinstance(plain, bytes) and plain.hex() == lx.graph_hash([res])
    assert X._set_buffer_donation(x, True)
    assert X._get_graph_hash([res]) == plain
    from torch_xla._dynamo.dynamo_bridge import alias_with_buffer_donor_config
    with alias_with_buffer_donor_config() as previous:
        assert previous is False
        assert X._get_graph_hash([res]) != plain
    assert not lx.explicit_donation_enabled()


def test_openxla_backend_runs_each_call_and_maps_the_donor_op(torch_xla):
    torch._dynamo.reset()
    assert torch.ops.xla.dynamo_set_buffer_donor_ is torch.ops.lazyxla.set_buffer_donor_

    def f(x):
        torch.ops.xla.dynamo_set_buffer_donor_(x, True)
        return x * 1.5

    import torch_xla.debug.metrics as met
    dev = torch_xla.device()
    x = torch.randn(5).to(dev)
    expected = x.cpu() * 1.5
    met.clear_all()
    res = torch.compile(f, backend="openxla")(x)
    # executed at the call, as PyTorch/XLA's bridge does: no sync needed
    assert lx.debug.tensor_info(res)["state"] == "device data"
    assert lx.is_donated(x) and lx.get_buffer_donation(x)
    # upstream's count under torch_xla's name (the fake-tensor call too); lazyxla's own is 1
    assert met.counter_value("XlaSetBufferDonation") == 2
    assert lx.metrics.counter_value("XlaSetBufferDonation") == 1
    assert "Counter: XlaSetBufferDonation\n  Value: 2" in met.metrics_report()
    met.clear_counters()
    assert met.counter_value("XlaSetBufferDonation") is None
    assert_close(res, expected)
    y = torch.randn(5).to(dev)
    pending = torch.compile(lambda v: v * 1.5, backend="lazyxla")(y)
    assert lx.debug.tensor_info(pending)["state"] == "pending"   # lazyxla fuses calls into the step
    with pytest.raises(Exception, match="unknown torch.compile option"):
        torch.compile(lambda v: v + 1, backend="lazyxla", options={"nope": 1})(y)
    from torch._dynamo import lookup_backend
    from lazyxla.compat.dynamo_backends import openxla
    for name in ("openxla", "openxla_eval"):   # torch's own entries of these names replaced
        assert lookup_backend(name) is openxla
    torch._dynamo.reset()


def test_openxla_training_matches_eager_and_runs_backward_at_the_call(torch_xla):
    import copy
    import torch_xla.core.xla_model as xm
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    dev = torch_xla.device()
    model = copy.deepcopy(ref).to(dev)
    compiled = torch.compile(model, backend="openxla")
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    xd, yd = x.to(dev), y.to(dev)
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(compiled(xd), yd)
        loss.backward()
        assert lx.debug.tensor_info(model[0].weight.grad)["state"] == "device data"
        xm.optimizer_step(opt)
        xm.mark_step()
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        assert_close(loss, ref_loss.detach())
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p, q.detach())
    torch._dynamo.reset()


# -- names the layer does not provide -------------------------------------------------

def test_unsupported_names_say_so(torch_xla):
    import torch_xla.core.xla_model as xm
    unsupported = r"torch_xla\.core\.xla_model\.{} is not supported yet by lazyxla"
    with pytest.raises(compat.UnsupportedError, match=unsupported.format("reduce_scatter")):
        xm.reduce_scatter("sum", [], 1.0, 0, 1)
    with pytest.raises(compat.UnsupportedError, match=unsupported.format("all_to_all")):
        from torch_xla.core.xla_model import all_to_all  # noqa: F401
    with pytest.raises(compat.UnsupportedError, match=r"torch_xla\._XLAC\._xla_sync_live_tensors"):
        torch_xla._XLAC._xla_sync_live_tensors
    with pytest.raises(ImportError, match=r"torch_xla\.core\.dynamo_bridge is not supported yet"):
        import torch_xla.core.dynamo_bridge  # noqa: F401
    assert not hasattr(xm, "__wrapped__")   # dunder probes stay AttributeErrors


def test_spmd_names_are_lx_spmd(torch_xla):
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    for name in ("Mesh", "mark_sharding", "clear_sharding", "get_1d_mesh", "set_global_mesh", "get_global_mesh"):
        assert getattr(xs, name) is getattr(lx.spmd, name)
    assert xr.is_spmd() is lx.spmd.is_spmd() is False   # this test process is not in SPMD mode
    assert xr.global_runtime_device_count() == lx.spmd.get_1d_mesh().size()
    alive = torch.zeros(1, device=lx.device())
    with pytest.raises(RuntimeError, match="before any lazyxla tensor exists"):
        xr.use_spmd()   # lx.spmd.use_spmd's own error: a tensor exists already
    assert not xr.is_spmd() and alive.device == torch_xla.device()
    with pytest.raises(compat.UnsupportedError, match=r"use_spmd\(auto=True\)"):
        xr.use_spmd(auto=True)
    with pytest.raises(compat.UnsupportedError, match=r"torch_xla\.distributed\.spmd\.XLAShardedTensor"):
        xs.XLAShardedTensor


# -- never shadowing a real torch_xla -------------------------------------------------

def test_real_torch_xla_is_not_shadowed_without_force(fake_real_torch_xla, capsys):
    with pytest.raises(compat.TorchXlaInstalledError, match="--force"):
        compat.install()
    assert not compat.installed()
    import torch_xla
    assert torch_xla.REAL
    sys.modules.pop("torch_xla")

    from lazyxla.compat.__main__ import main
    with pytest.raises(SystemExit) as exit_:
        main([os.path.join(REPO, "examples", "torch_xla_train.py")])
    assert exit_.value.code == 2
    assert fake_real_torch_xla in capsys.readouterr().err

    compat.install(force=True)
    assert "shadowing the installed torch_xla" in capsys.readouterr().err
    import torch_xla
    assert torch_xla.device() == torch.device("xla", 0)


def test_install_refuses_after_a_real_torch_xla_was_imported(fake_real_torch_xla):
    import torch_xla  # noqa: F401  (the "real" one)
    with pytest.raises(compat.TorchXlaInstalledError, match="imported already"):
        compat.install(force=True)


# -- the CLI --------------------------------------------------------------------------

def test_cli_runs_a_script_as_main_with_argv(tmp_path, monkeypatch, capsys):
    (tmp_path / "helper_mod.py").write_text("VALUE = 41\n")
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""\
        import sys
        import torch_xla
        import helper_mod   # the script's folder is first on sys.path, as with `python script.py`
        print("argv", sys.argv[1:], __name__, torch_xla.__name__, helper_mod.VALUE + 1)
        """))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    from lazyxla.compat.__main__ import main
    try:
        main([str(script), "--lr", "0.1", "x"])
    finally:
        compat.uninstall()
        sys.modules.pop("helper_mod", None)
    out = capsys.readouterr().out
    assert "argv ['--lr', '0.1', 'x'] __main__ lazyxla.compat.torch_xla 42" in out


def _run_example(name: str, steps: int, **env_extra: str) -> subprocess.CompletedProcess:
    """`python -m lazyxla.compat examples/NAME --steps STEPS` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "lazyxla.compat", f"examples/{name}", "--steps", str(steps)],
                          cwd=REPO, env=child_env(**env_extra), capture_output=True, text=True, timeout=300)


def _eager_losses(steps: int, lr: float = 0.1, seed: int = 0) -> list:
    """examples/torch_xla_train.py's problem, in eager PyTorch on the CPU."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs, labels = torch.randn(64, 16), torch.randint(0, 4, (64,))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_torch_xla_training_script_runs_unchanged_and_matches_eager():
    steps = 6
    run = _run_example("torch_xla_train.py", steps)
    assert run.returncode == 0, run.stderr
    losses = [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", run.stdout, re.M)]
    assert len(losses) == steps
    assert losses == pytest.approx(_eager_losses(steps), rel=1e-5, abs=1e-6)
    report = run.stdout
    assert re.search(r"Counter: MarkStep\n  Value: 6\n", report)
    # steady state: step 0 (no momentum yet) and step 1 compile, later steps hit the cache
    assert re.search(r"Counter: UncachedCompile\n  Value: 2\n", report)
    assert re.search(r"Counter: CachedCompile\n  Value: 4\n", report)


def test_xla_enable_param_aliasing_env_sets_the_aliasing_switch(torch_xla, monkeypatch):
    monkeypatch.setenv("XLA_ENABLE_PARAM_ALIASING", "0")
    monkeypatch.delenv("LAZYXLA_ALIASING", raising=False)
    importlib.reload(torch_xla)   # upstream reads it once per process, at first use
    assert not lx.aliasing_enabled()
    t = torch.randn(3).to(torch_xla.device())
    lx.metrics.clear_all()
    t += 1
    torch_xla.sync()
    assert lx.metrics.metric_data("InputOutputAliasCount")[1] == 0


def test_cli_runs_a_module_with_argv(tmp_path, monkeypatch, capsys):
    (tmp_path / "xla_job.py").write_text(
        "import sys, torch_xla\nprint('module argv', sys.argv[1:], __name__, torch_xla.device())\n")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    from lazyxla.compat.__main__ import main
    try:
        main(["-m", "xla_job", "--steps", "3"])
    finally:
        compat.uninstall()
        sys.modules.pop("xla_job", None)
    assert "module argv ['--steps', '3'] __main__ xla:0" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [([], "give a SCRIPT"), (["--bogus", "x.py"], "unknown option --bogus"),
                                           (["-m"], "-m needs a MODULE"), (["/no/such.py"], "no such script")])
def test_cli_usage_errors(argv, message, capsys):
    from lazyxla.compat.__main__ import main
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not compat.installed()


@pytest.mark.slow
def test_torch_xla_spmd_script_runs_unchanged_and_matches_eager():
    """The data-parallel script over 4 forced CPU devices matches eager."""
    steps = 4
    run = _run_example("torch_xla_spmd_train.py", steps, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert run.returncode == 0, run.stderr
    losses = [float(v) for v in re.findall(r"^step \d+ loss (\S+)$", run.stdout, re.M)]
    assert losses == pytest.approx(_eager_losses(steps), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("per_execution, barriers", [(1, 5), (2, 3)])
def test_mp_device_loader_moves_batches_and_steps_like_upstream(torch_xla, per_execution, barriers):
    """Upstream's PerDeviceLoader: a barrier check before each of the 3 + 1 fetches
    (every `batches_per_execution`-th passes), plus one at the end."""
    import torch_xla.distributed.parallel_loader as pl
    data = [(torch.full((2,), float(i)), {"y": torch.tensor([i])}) for i in range(3)]
    loader = pl.MpDeviceLoader(data, torch_xla.device(), batches_per_execution=per_execution)
    assert len(loader) == 3
    lx.metrics.clear_all()
    seen = []
    for x, extra in loader:
        assert x.device == torch_xla.device() and extra["y"].device == torch_xla.device()
        seen.append((x * 2).cpu())
    assert lx.metrics.counter_value("MarkStep") == barriers
    assert [s.tolist() for s in seen] == [[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]
    import torch_xla.core.xla_model as xm
    ran = []
    for step, _ in enumerate(loader):            # upstream's examples log from a closure
        xm.add_step_closure(ran.append, args=(step,))
    assert ran == [0, 1, 2]                       # each at a barrier of the loader
    with pytest.raises(TypeError, match="ShardingSpec"):
        pl.MpDeviceLoader(data, torch_xla.device(), input_sharding=object())
    with pytest.raises(TypeError, match="unexpected keyword"):
        pl.MpDeviceLoader(data, torch_xla.device(), prefetch_size=3)


def test_mp_device_loader_honours_prefetch_options(torch_xla):
    """device_prefetch_size / host_to_device_transfer_threads / loader_prefetch_size reach
    lx.data.DeviceLoader; options are read at iter() (transformers sets input_sharding later)."""
    import threading
    import torch_xla.distributed.parallel_loader as pl
    data = [torch.full((3,), float(i)) for i in range(7)]
    loader = pl.MpDeviceLoader(data, torch_xla.device(), device_prefetch_size=2, loader_prefetch_size=3,
                               host_to_device_transfer_threads=3)
    it = iter(loader)
    names = [t.name for t in threading.enumerate() if t.name.startswith("lazyxla-loader")]
    assert sorted(names) == ["lazyxla-loader-fetch"] + [f"lazyxla-loader-transfer-{i}" for i in range(3)]
    assert [b[0].item() for b in it] == [float(i) for i in range(7)]
    loader._parallel_loader_kwargs["device_prefetch_size"] = 0   # synchronous: no threads
    it = iter(loader)
    assert not [t for t in threading.enumerate() if t.name.startswith("lazyxla-loader")]
    assert next(it).device == torch_xla.device()
    per_device = pl.ParallelLoader(data, [torch_xla.device()]).per_device_loader(torch_xla.device())
    assert [b[0].item() for b in per_device] == [float(i) for i in range(7)]
    with pytest.raises(compat.UnsupportedError, match="several devices"):
        pl.ParallelLoader(data, [torch_xla.device(), torch_xla.device()])


def test_compile_and_step_regions_sync_before_and_after(torch_xla):
    dev = torch_xla.device()
    x = torch.ones(3).to(dev)
    pending = x + 1

    @torch_xla.compile
    def double(t):
        assert lx.debug.tensor_info(pending)["state"] == "device data"   # synced before
        return t * 2

    before = lx.metrics.counter_value("MarkStep") or 0
    out = double(x)
    assert lx.debug.tensor_info(out)["state"] == "device data"   # and after
    with torch_xla.step():
        y = x * 3
    assert lx.debug.tensor_info(y)["state"] == "device data"
    assert lx.metrics.counter_value("MarkStep") == before + 4
    assert_close(out, torch.full((3,), 2.0))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_distributed_checkpoint_names_and_checkpoint_manager(torch_xla, tmp_path):
    from torch_xla.experimental.distributed_checkpoint import (CheckpointManager, SPMDLoadPlanner,
                                                               SPMDSavePlanner, prime_optimizer)
    from torch_xla.experimental.distributed_checkpoint._helpers import _sharded_cpu_state_dict
    ck = lx.spmd.checkpoint
    assert (SPMDSavePlanner, SPMDLoadPlanner, prime_optimizer) == (ck.SavePlanner, ck.LoadPlanner,
                                                                   ck.prime_optimizer)
    assert _sharded_cpu_state_dict is ck.sharded_cpu_state_dict
    dev = torch_xla.device()
    model = torch.nn.Linear(4, 3).to(dev)
    manager = CheckpointManager(str(tmp_path), save_interval=5, max_to_keep=2, chkpt_on_preemption=False)
    assert not manager.save(3, model.state_dict()) and manager.all_steps() == []
    for step in (5, 10):
        assert manager.save(step, model.state_dict())
    expected = model.weight.cpu()
    with torch.no_grad():
        model.weight.add_(1)
    assert manager.save_async(15, model.state_dict())   # a snapshot taken now
    with torch.no_grad():
        model.weight.add_(1)
    manager.join()
    assert manager.all_steps() == [10, 15]   # the oldest dropped
    assert CheckpointManager(str(tmp_path), save_interval=5, chkpt_on_preemption=False).all_steps() == [10, 15]
    fresh = torch.nn.Linear(4, 3).to(dev)
    state = fresh.state_dict()
    manager.restore(10, state)
    assert torch.equal(fresh.weight.cpu(), expected)
    manager.restore(15, state)
    assert torch.equal(fresh.weight.cpu(), expected + 1)
    with pytest.raises(ValueError, match="no complete checkpoint of step 5"):
        manager.restore(5, state)


def test_launch_runs_in_this_process_with_one_device(torch_xla):
    import torch_xla.core.xla_model as xm
    seen = []
    torch_xla.launch(lambda index, tag: seen.append((index, tag, xm.rendezvous("t", b"x"))), args=("a",))
    assert seen == [(0, "a", [b"x"])]


@pytest.mark.slow
@needs_sockets
def test_launch_runs_one_process_per_host_device():
    out = subprocess.run([sys.executable, "-m", "lazyxla.compat", "examples/torch_xla_launch.py"],
                         capture_output=True, text=True, timeout=600, cwd=REPO, env=child_env(CPU_NUM_DEVICES="2"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "2 processes exchanged ['[0.0, 0.0]', '[3.0, 3.0]']" in out.stdout


def test_amp_is_torch_autocast_and_grad_scaler_on_lazyxla(torch_xla):
    import torch_xla.amp as amp
    from torch_xla.amp import syncfree
    assert syncfree.AdamW is torch.optim.AdamW
    dev = torch_xla.device()
    x = torch.randn(4, 8).to(dev)

    def run(autocast, scaler, opt_cls) -> list:
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 2).to(dev)
        opt = opt_cls(model.parameters(), lr=0.1)
        for _ in range(2):
            with autocast():
                out = model(x)
                assert out.dtype == torch.bfloat16
                loss = out.float().square().mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            lx.sync()
        return [p.cpu() for p in model.parameters()]

    mapped = run(lambda: amp.autocast(dev), amp.GradScaler(), syncfree.AdamW)
    plain = run(lambda: torch.autocast("lazyxla", dtype=torch.bfloat16), torch.amp.GradScaler("lazyxla"),
                torch.optim.AdamW)
    for a, b in zip(mapped, plain):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="not an XLA device"):
        amp.autocast("cpu")


def test_xm_attribute_fork_rng_and_hlo_text(torch_xla):
    """What upstream's scan_layers tests use: `torch_xla.xm`, `xm.fork_rng` with
    `set_rng_state`, and `_XLAC._get_xla_tensors_hlo` (lx.debug.hlo_text)."""
    import torch_xla.core.xla_model as xm
    from torch_xla.experimental.scan import scan
    assert torch_xla.xm is xm
    before = xm.get_rng_state()
    draws = []
    for _ in range(2):
        with xm.fork_rng():
            xm.set_rng_state(42)
            draws.append(torch.rand(5, device="xla").cpu())
    assert torch.equal(draws[0], draws[1]) and torch.equal(xm.get_rng_state(), before)

    dev = torch_xla.device()
    xs = torch.arange(12.0).reshape(3, 4)
    carry, _ = scan(lambda c, x: (c + x, c * x), torch.zeros(4, device=dev), xs.to(dev))
    lx.metrics.clear_all()
    text = torch_xla._XLAC._get_xla_tensors_hlo([carry])
    assert text.startswith("HloModule") and "while(" in text and "condition=" in text and "body=" in text
    assert lx.metrics.counter_value("UncachedCompile") is None   # lowered only: nothing compiled or run
    assert carry.cpu().tolist() == xs.sum(0).tolist()
    assert lx.debug.hlo_text([]) == "(nothing pending)"


def test_scan_partition_fn_chooses_saved_activations_or_rerunning(torch_xla):
    """Upstream's default partition saves activations (the backward has no sine),
    min-cut re-runs the iteration (the inner sines, whose values the outer ones'
    derivatives read); the gradients are equal."""
    from functorch.compile import default_partition, min_cut_rematerialization_partition
    from torch_xla.experimental.scan import scan
    dev = torch_xla.device()
    init, xs = torch.randn(4), torch.randn(3, 4)
    grads = {}
    for partition in (default_partition, min_cut_rematerialization_partition):
        c, x = init.to(dev).requires_grad_(), xs.to(dev).requires_grad_()
        carry, ys = scan(lambda c, x: (torch.sin(torch.sin(c)), torch.sin(torch.sin(c + x))), c, x,
                         partition_fn=partition)
        torch_xla.sync()
        (carry.sum() + ys.sum()).backward()
        text = torch_xla._XLAC._get_xla_tensors_hlo([c.grad, x.grad])
        grads[partition] = (text.count(" sine("), c.grad.cpu(), x.grad.cpu())
    (saved, c1, x1), (rerun, c2, x2) = grads[default_partition], grads[min_cut_rematerialization_partition]
    assert saved == 0 and rerun == 2
    assert_close(c1, c2)
    assert_close(x1, x2)


def test_backends_mat_mul_precision_is_lx_matmul_precision(torch_xla):
    """torch_xla.backends onto lx.set_matmul_precision: the level reaches XLA's dot
    (its HLO) and the compile cache key (another level compiles again); the values are
    eager's within the level's precision on this platform (XLA:CPU computes float32 the
    same at every level; a TPU runs "default" and "high" as bf16 passes)."""
    import re
    import torch_xla.backends as backends
    dev = torch_xla.device()
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert backends.get_mat_mul_precision() == "default"   # upstream's default, on every platform
    try:
        products = []
        for level in ("high", "default", "high"):
            backends.set_mat_mul_precision(level)
            assert lx.matmul_precision() == level
            c = a.to(dev) @ b.to(dev)
            # XLA omits the DEFAULT precision from the dot
            expected = [] if level == "default" else [level]
            assert re.findall(r"operand_precision=\{(\w+),", lx.debug.hlo_text([c])) == expected
            lx.metrics.clear_all()
            products.append(c.cpu())
            assert (lx.metrics.counter_value("UncachedCompile") or 0) == (0 if len(products) == 3 else 1)
        for level, product in zip(("high", "default"), products):
            assert_close(product, a @ b, **matmul_tolerance(a @ b, rtol=1e-5, atol=1e-6, level=level))
        with pytest.raises(ValueError, match="'medium' is not one of 'default', 'high', 'highest'"):
            backends.set_mat_mul_precision("medium")
    finally:
        backends.set_mat_mul_precision("default")
