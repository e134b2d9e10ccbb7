"""lazyxla.compat: the torch_xla names Hugging Face's Trainer / accelerate and PyTorch/XLA's
example scripts call (collectives with one replica, host data, RateTracker, the
torch_xla distribution in importlib.metadata, torch_xla.compile(full_graph=True),
SampleGenerator, xla_backend, fsdp.wrap, test_utils), against eager CPU torch and
upstream's one-replica semantics."""
import functools
import importlib.metadata
import json
import os
import subprocess
import sys

import pytest
import torch

import lazyxla as lx
import lazyxla.compat as compat
from helpers import assert_close, child_env, needs_sockets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def xm(torch_xla):
    import torch_xla.core.xla_model as xm
    return xm


def _graphs() -> int:
    return sum(lx.metrics.counter_value(n) or 0 for n in ("CachedCompile", "UncachedCompile"))


# -- collectives with one replica ------------------------------------------------------

def test_all_reduce_with_one_replica_is_upstreams_no_op(xm, monkeypatch):
    monkeypatch.delenv("XLA_ALWAYS_ALLREDUCE", raising=False)
    assert (xm.REDUCE_SUM, xm.REDUCE_MUL, xm.REDUCE_AND, xm.REDUCE_OR, xm.REDUCE_MIN, xm.REDUCE_MAX) == \
        ("sum", "mul", "and", "or", "min", "max")
    dev = lx.device()
    t = torch.arange(4.0).to(dev)
    out = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5)
    assert out is not t and out.device == t.device and isinstance(out, lx.LazyTensor)
    assert_close(out, torch.arange(4.0))   # upstream skips the reduction, scale included
    grads = [torch.ones(3).to(dev), torch.full((2,), 2.0).to(dev)]
    assert xm.all_reduce("sum", grads, scale=0.25) is grads
    assert_close(grads, [torch.ones(3), torch.full((2,), 2.0)])
    with pytest.raises(ValueError, match="unknown reduce type"):
        xm.all_reduce("avg", t)


def test_all_reduce_always_runs_the_one_replica_reduction_with_the_env(xm, monkeypatch):
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")
    dev = lx.device()
    t = torch.arange(4.0).to(dev)
    assert_close(xm.all_reduce(xm.REDUCE_MAX, t, scale=2.0), torch.arange(4.0) * 2)
    assert_close(t, torch.arange(4.0))   # the tensor form is out of place
    grads = [torch.ones(3).to(dev)]
    xm.all_reduce(xm.REDUCE_SUM, grads, 0.5)   # accelerate's in-place list form
    assert_close(grads[0], torch.full((3,), 0.5))


def test_all_gather_and_broadcast_with_one_replica(xm, torch_xla):
    dev = lx.device()
    t = torch.arange(6.0).reshape(2, 3).to(dev)
    assert_close(xm.all_gather(t, dim=-1), torch.arange(6.0).reshape(2, 3))
    out = torch.zeros(2, 3).to(dev)
    assert xm.all_gather(t, output=out) is out
    assert_close(out, torch.arange(6.0).reshape(2, 3))
    with pytest.raises(RuntimeError, match="pin_layout=True is not yet supported"):
        xm.all_gather([t, t])
    gathered = xm.all_gather([t, t + 1], pin_layout=False)
    assert_close(gathered, [torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3) + 1])
    with pytest.raises(TypeError):
        xm.all_gather("x")

    xm.collective_broadcast([t])
    assert_close(t, torch.arange(6.0).reshape(2, 3))
    with pytest.raises(ValueError, match="root_ordinal 1"):
        xm.collective_broadcast([t], root_ordinal=1)

    model = torch.nn.Linear(3, 2).to(dev)
    before = [p.cpu() for p in model.parameters()]
    lx.metrics.clear_all()
    xm.broadcast_master_param(model)
    assert lx.metrics.counter_value("MarkStep") == 1   # then a step barrier, as upstream
    assert_close([p.cpu() for p in model.parameters()], before)


def test_mesh_reduce_gives_reduce_fn_the_cpu_data_of_every_process(xm):
    dev = lx.device()
    t = torch.arange(3.0).to(dev) * 2
    out = xm.mesh_reduce("tag", t, torch.cat)   # transformers' nested_xla_mesh_reduce
    assert out.device.type == "cpu"
    assert_close(out, torch.arange(3.0) * 2)
    assert xm.mesh_reduce("acc", 0.75, lambda xs: sum(xs) / len(xs)) == 0.75
    assert xm.mesh_reduce("obj", {"a": t}, lambda xs: xs[0])["a"].device.type == "cpu"


def test_optimizer_step_reduces_nothing_with_one_replica_and_matches_eager(xm):
    def run(dev, step):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(8, 4).to(dev)
        for _ in range(2):
            opt.zero_grad()
            model(x).square().mean().backward()
            step(opt)
        return [p.detach().cpu() for p in model.parameters()]

    expected = run("cpu", lambda opt: opt.step())
    assert_close(run(lx.device(), lambda opt: xm.optimizer_step(opt, barrier=True)), expected)
    assert_close(run(lx.device(), lambda opt: (xm.reduce_gradients(opt), opt.step())), expected)


def test_fetch_gradients_and_set_replication(xm, torch_xla):
    dev = lx.device()
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert xm._fetch_gradients(opt) == []
    model(torch.ones(2, 3).to(dev)).sum().backward()
    model[1].bias.grad = None
    grads = xm._fetch_gradients(opt)
    assert [g is p.grad for g, p in zip(grads, list(model.parameters())[:3])] == [True] * 3 and len(grads) == 3

    # accelerate: xm.set_replication(device, xm.get_xla_supported_devices())
    xm.set_replication(torch_xla.device(), xm.get_xla_supported_devices())
    xm.set_replication(torch_xla.device(), [])
    with pytest.raises(ValueError, match="not in"):
        xm.set_replication("xla:0", ["xla:7"])


# -- host data ------------------------------------------------------------------------

def test_maybe_convert_to_cpu_reads_plain_tensors_in_one_graph(xm):
    dev = lx.device()
    base = torch.arange(4.0).to(dev)
    param = torch.nn.Parameter(torch.ones(2).to(dev))
    data = {"a": base * 2, "b": (base + 1, 3, "s"), "p": param}
    lx.metrics.clear_all()
    cpu = xm._maybe_convert_to_cpu(data)
    assert _graphs() == 1
    assert cpu["a"].device.type == "cpu" and isinstance(cpu["b"], tuple) and cpu["b"][1:] == (3, "s")
    assert_close(cpu["a"], torch.arange(4.0) * 2)
    assert_close(cpu["b"][0], torch.arange(4.0) + 1)
    assert cpu["p"] is param   # upstream selects plain tensors (type(v) == torch.Tensor)

    pending = base * 3
    lx.metrics.clear_all()
    assert xm._maybe_convert_to_cpu([pending], convert=False)[0] is pending
    assert _graphs() == 1 and lx.debug.tensor_info(pending)["state"] == "device data"
    lx.metrics.clear_all()
    assert_close(pending, torch.arange(4.0) * 3)
    assert _graphs() == 0   # materialised already, nothing left to run


def test_send_cpu_data_to_device_moves_cpu_tensors(xm, torch_xla):
    moved = xm.send_cpu_data_to_device(torch.arange(3), torch_xla.device())
    assert isinstance(moved, list) and moved[0].device == torch_xla.device()   # a tensor alone: a list
    param = torch.nn.Parameter(torch.ones(2))
    state = {"step": 3, "t": torch.ones(2), "nested": [(torch.zeros(1), 1.5)], "p": param}
    out = xm.send_cpu_data_to_device(state, "xla:0")
    assert out["step"] == 3 and out["t"].device == out["nested"][0][0].device == torch_xla.device()
    assert isinstance(out["nested"][0], tuple) and out["nested"][0][1] == 1.5
    assert out["p"] is param
    assert_close(out["t"], torch.ones(2))
    with pytest.raises(compat.UnsupportedError, match="input_sharding"):
        xm.send_cpu_data_to_device(state, "xla:0", input_sharding=object())


def test_lx_utils_to_cpu_and_map_tensors():
    dev = lx.device()
    t = torch.arange(3.0).to(dev)
    param = torch.nn.Parameter(torch.ones(2).to(dev))
    lx.metrics.clear_all()
    cpu = lx.utils.to_cpu({"x": [t + 1, (t * 2,)], "p": param, "n": None})
    assert _graphs() == 1
    assert_close(cpu["x"][0], torch.arange(3.0) + 1)
    assert isinstance(cpu["x"][1], tuple) and cpu["x"][1][0].device.type == "cpu"
    assert isinstance(cpu["p"], torch.nn.Parameter) and cpu["p"].device.type == "cpu" and cpu["n"] is None
    doubled = lx.utils.map_tensors([torch.ones(1), 2, {"k": torch.zeros(1)}], lambda v: v.sum() == 0, lambda v: v + 5)
    assert doubled[0].item() == 1 and doubled[1] == 2 and doubled[2]["k"].item() == 5


def test_rate_tracker_smooths_as_upstream(xm, monkeypatch):
    import torch_xla.core.xla_model as xla_model
    clock = [100.0]
    monkeypatch.setattr(xla_model.time, "time", lambda: clock[0])
    monkeypatch.delenv("RATE_TRACKER_SMOOTHING", raising=False)
    tracker = xm.RateTracker()
    tracker.add(10)
    clock[0] = 102.0
    assert tracker.rate() == pytest.approx(5.0)   # first rate: unsmoothed
    tracker.add(30)
    clock[0] = 104.0
    assert tracker.rate() == pytest.approx(0.6 * 15.0 + 0.4 * 5.0)
    assert tracker.global_rate() == pytest.approx(40 / 4.0)
    assert tracker.rate() == 0.0   # no time passed
    monkeypatch.setenv("RATE_TRACKER_SMOOTHING", "0.9")
    assert xm.RateTracker()._smooth_factor == 0.9 and xm.RateTracker(0.1)._smooth_factor == 0.1


# -- the torch_xla distribution ---------------------------------------------------------

def test_importlib_metadata_finds_torch_xla_while_installed(torch_xla):
    version = importlib.metadata.version("torch_xla")
    assert version == torch_xla.__version__ == importlib.metadata.version("torch-xla")
    assert version.startswith("2.9.0+lazyxla.")
    from packaging import version as pv
    assert pv.parse(version) >= pv.parse("2.2.0")   # transformers' FSDPv2 gate
    assert importlib.metadata.metadata("torch_xla")["Name"] == "torch_xla"
    assert "torch_xla" in importlib.metadata.packages_distributions()
    compat.uninstall()
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("torch_xla")
    compat.install()
    assert importlib.metadata.version("torch_xla") == version


def test_transformers_and_accelerate_see_torch_xla_under_the_layer():
    pytest.importorskip("accelerate")
    code = (
        "import lazyxla.compat as c; c.install()\n"
        "from transformers.utils import import_utils as iu\n"
        "from accelerate.utils import imports as ai\n"
        "print(repr((iu.is_torch_xla_available(), iu._is_package_available('torch_xla', return_version=True),"
        " ai.is_torch_xla_available(), iu.is_torch_xla_available(check_is_tpu=True))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                         env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    available, (found, version), accelerate_available, tpu = eval(out.stdout.strip().splitlines()[-1])
    assert (available, found, accelerate_available, tpu) == (True, True, True, False)   # the child's JAX: CPU
    assert version.startswith("2.9.0+lazyxla.")


# -- torch_xla.compile, SampleGenerator, _XLAC ----------------------------------------------

def test_compile_full_graph_runs_the_step_as_one_graph(torch_xla):
    import torch_xla.core.xla_model as xm
    dev = torch_xla.device()

    def train(step_fn, data):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3).to(data.device)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)

        def step(x):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()   # lazyxla's implied barrier is off inside: the region is the step
            return loss
        fn = step_fn(step)
        return [fn(data).detach().cpu() for _ in range(3)], [p.detach().cpu() for p in model.parameters()]

    x = torch.randn(5, 4)
    expected = train(lambda f: f, x)
    lx.metrics.clear_all()
    got = train(lambda f: torch_xla.compile(f, full_graph=True, name="step"), x.to(dev))
    assert lx.metrics.counter_value("ImpliedBarrier") is None
    assert lx.metrics.counter_value("MarkStep") == 6   # a barrier before and after each call
    assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert lx.implied_barriers_enabled()   # restored

    def reads_the_host(v):
        return (v * 2).sum().item()
    with pytest.raises(RuntimeError, match=r"full_graph=True\): reads_the_host ran 1 graph"):
        torch_xla.compile(reads_the_host, full_graph=True)(x.to(dev))
    assert torch_xla.compile(reads_the_host)(x.to(dev)) == pytest.approx((x * 2).sum().item(), rel=1e-6)
    with pytest.raises(compat.UnsupportedError, match="max_different_graphs"):
        torch_xla.compile(reads_the_host, max_different_graphs=1)
    xm.mark_step()


def test_compile_traces_lazily_inside_eager_mode(torch_xla):
    import torch_xla.experimental as exp
    dev = torch_xla.device()
    x = torch.randn(3, 3).to(dev)
    exp.eager_mode(True)
    try:
        lx.metrics.clear_all()
        with torch_xla.compile(full_graph=True):
            y = (x @ x).relu() + 1
            assert not lx.experimental.is_eager_mode()
        assert _graphs() == 1   # three ops, one graph at the closing sync
        assert lx.experimental.is_eager_mode()
    finally:
        exp.eager_mode(False)
    assert_close(y, (x.cpu() @ x.cpu()).relu() + 1)


def test_sample_generator_and_metrics_report_binding(torch_xla):
    from torch_xla.utils.utils import SampleGenerator
    import torch_xla.debug.metrics as met
    data = (torch.zeros(2), torch.ones(2))
    gen = SampleGenerator(data, sample_count=3)
    assert len(gen) == 3 and list(gen) == [data] * 3 and len(list(gen)) == 3   # each iter() starts over
    assert all(d is data for d in gen)
    torch_xla.sync()
    assert "Counter: MarkStep" in torch_xla._XLAC._xla_metrics_report()
    assert torch_xla._XLAC._xla_metrics_report().split("Counter:")[0] == met.metrics_report().split("Counter:")[0]


# -- distributed modules ---------------------------------------------------------------

def test_xla_backend_registers_the_name_and_refuses_the_group(torch_xla):
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend as xbn
    assert "xla" in dist.Backend.backend_list
    with pytest.raises(compat.UnsupportedError, match='backend="gloo"'):
        dist.init_process_group("xla", store=dist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()
    with pytest.raises(compat.UnsupportedError, match="xla_backend.ProcessGroupXla"):
        xbn.ProcessGroupXla


def test_fsdp_wrap_policies_are_torchs_under_upstreams_names(torch_xla):
    from torch.distributed.fsdp import wrap as torch_wrap
    from torch_xla.distributed.fsdp import wrap
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), layer, torch.nn.ModuleList([torch.nn.Linear(8, 8)]))
    policy = functools.partial(wrap.transformer_auto_wrap_policy,
                               transformer_layer_cls={torch.nn.TransformerEncoderLayer})
    assert [policy(m, recurse=False, unwrapped_params=0) for m in model] == [False, True, False]
    assert policy(model, True, 0)
    size = functools.partial(wrap.size_based_auto_wrap_policy, min_num_params=50)
    for m in [model, *model, layer.self_attn]:
        n = sum(p.numel() for p in m.parameters())
        for recurse in (True, False):
            assert size(m, recurse, unwrapped_params=n) == torch_wrap.size_based_auto_wrap_policy(
                m, recurse, n, min_num_params=50)
    assert size(model[2], False, unwrapped_params=1000) is False   # ModuleList excluded by default
    assert size(layer.self_attn, True, unwrapped_params=1000) is False   # MultiheadAttention a leaf
    assert wrap.size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES == {torch.nn.ModuleList, torch.nn.ModuleDict}
    assert wrap.always_wrap_policy(model, True, 0)
    assert wrap.lambda_auto_wrap_policy(model[0], False, 0, lambda m: isinstance(m, torch.nn.Linear))
    import torch_xla.distributed.fsdp as fsdp
    with pytest.raises(compat.UnsupportedError, match="XlaFullyShardedDataParallel"):
        fsdp.XlaFullyShardedDataParallel(model)   # importable (transformers imports it), not made


def test_mp_model_wrapper_moves_the_model(torch_xla):
    import torch_xla.distributed.xla_multiprocessing as xmp
    model = torch.nn.Linear(2, 2)
    wrapped = xmp.MpModelWrapper(model)
    assert wrapped.to(torch_xla.device()) is model and model.weight.device == torch_xla.device()


# -- test_utils --------------------------------------------------------------------------

class _Writer:
    def __init__(self):
        self.scalars, self.closed = [], False

    def add_scalar(self, key, value, step=None):
        self.scalars.append((key, value, step))

    def flush(self):
        pass

    def close(self):
        self.closed = True


def test_test_utils_prints_updates_and_writes_summaries(torch_xla, capsys):
    import torch_xla.test.test_utils as tu
    dev = torch_xla.device()
    writer = _Writer()
    tu.print_training_update(dev, 10, 0.123456, 5.0, 4.25, epoch=2, summary_writer=writer)
    tu.print_test_update(dev, 97.5, epoch=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| Training Device=xla:0/0 Epoch=2 Step=10 Loss=0.12346 Rate=5.00 "
                               "GlobalRate=4.25 Time=")
    assert lines[1].startswith("| Test Device=xla:0/0 Epoch=2 Accuracy=97.50 Time=")
    assert writer.scalars == [("examples/sec", 5.0, None), ("average_examples/sec", 4.25, None)]

    writer = _Writer()
    t = torch.ones(2).to(dev)
    t += 1
    torch_xla.sync()
    tu.write_to_summary(writer, 7, {"loss": 0.5}, write_xla_metrics=True)
    points = {k: v for k, v, step in writer.scalars if step == 7}
    assert points["loss"] == 0.5 and points["MarkStep__Value"] >= 1
    assert points["InputOutputAliasCount__TotalSamples"] >= 1 and "aten_ops_sum" in points
    tu.write_to_summary(None, 1, {"x": 1})   # no writer: nothing
    assert tu.get_summary_writer(None) is None
    tu.close_summary_writer(writer)
    assert writer.closed


# -- collectives between processes (torch_xla.launch, CPU_NUM_DEVICES=2) -------------------

_COLLECTIVES_SCRIPT = '''
import json
import torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _mp_fn(index):
    dev = torch_xla.device()
    rank, world = xr.global_ordinal(), xr.world_size()
    t = torch.tensor([1.0, 2.0]).to(dev) * (rank + 1)
    total = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5)
    biggest = [t.clone()]
    xm.all_reduce(xm.REDUCE_MAX, biggest)
    gathered = xm.all_gather(t.unsqueeze(0), dim=0)
    b = [torch.full((2,), float(rank)).to(dev)]
    xm.collective_broadcast(b, root_ordinal=1)
    mean = xm.mesh_reduce("m", rank + 1.0, lambda xs: sum(xs) / len(xs))
    torch.manual_seed(rank)   # different models: broadcast_master_param makes them rank 0's
    model = torch.nn.Linear(2, 1).to(dev)
    xm.broadcast_master_param(model)
    model(torch.ones(3, 2).to(dev) * (rank + 1)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    xm.optimizer_step(opt)   # gradients averaged over the processes
    # one file per rank: the two processes' stdout lines can interleave in the shared pipe
    with open(f"rank{rank}of{world}.json", "w") as f:
        json.dump([total.cpu().tolist(), t.cpu().tolist(), biggest[0].cpu().tolist(),
                   gathered.cpu().tolist(), b[0].cpu().tolist(), mean, model.weight.detach().cpu().tolist(),
                   model.bias.detach().cpu().tolist()], f)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn)
'''


@pytest.mark.slow
@needs_sockets
def test_collectives_between_processes_go_through_gloo(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(_COLLECTIVES_SCRIPT)
    out = subprocess.run([sys.executable, "-m", "lazyxla.compat", str(script)], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=child_env(CPU_NUM_DEVICES="2"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = {f"{r}/2": json.loads((tmp_path / f"rank{r}of2.json").read_text()) for r in range(2)}
    torch.manual_seed(0)
    reference = torch.nn.Linear(2, 1)   # rank 0's model, which every rank takes
    # mean of the two ranks' gradients: inputs ones*(rank+1), 3 rows: d/dw = 3*(rank+1), d/db = 3
    weight = (reference.weight.detach() - (3 * 1 + 3 * 2) / 2).flatten().tolist()
    bias = (reference.bias.detach() - 3.0).tolist()
    for rank, key in enumerate(["0/2", "1/2"]):
        total, t, biggest, gathered, b, mean, w, bb = lines[key]
        assert total == [1.5, 3.0]   # (1 + 2) * [1, 2] * 0.5
        assert t == [float(rank + 1), 2.0 * (rank + 1)]   # the tensor form is out of place
        assert biggest == [2.0, 4.0] and gathered == [[1.0, 2.0], [2.0, 4.0]] and b == [1.0, 1.0]
        assert mean == 1.5
        assert w[0] == pytest.approx(weight) and bb == pytest.approx(bias)


# -- an unchanged Hugging Face Trainer script --------------------------------------------

_TRAINER_SCRIPT = '''
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
torch.manual_seed(0)
config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=100, n_positions=16, resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config)
data = [{"input_ids": torch.randint(0, 100, (16,)), "labels": torch.randint(0, 100, (16,))} for _ in range(8)]
args = TrainingArguments(OUT, per_device_train_batch_size=4, max_steps=3, logging_steps=1, report_to=[],
                         save_strategy="no")
result = Trainer(model=model, args=args, train_dataset=data).train()
print("device", args.device, "loss", result.training_loss)
'''


@pytest.mark.slow
def test_trainer_takes_the_xla_path_and_matches_cpu(tmp_path):
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    script = tmp_path / "trainer.py"
    script.write_text(f"OUT = {str(tmp_path / 'out')!r}\n" + _TRAINER_SCRIPT)
    runs = {}
    for name, command in (("cpu", [str(script)]), ("xla", ["-m", "lazyxla.compat", str(script)])):
        out = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=600,
                             cwd=tmp_path, env=child_env())
        assert out.returncode == 0, out.stderr[-4000:]
        device, loss = out.stdout.split("device ")[-1].split(" loss ")
        runs[name] = (device, float(loss))
    assert runs["cpu"][0] == "cpu" and runs["xla"][0] == "xla:0"   # transformers' torch_xla path
    assert runs["xla"][1] == pytest.approx(runs["cpu"][1], rel=1e-5)
