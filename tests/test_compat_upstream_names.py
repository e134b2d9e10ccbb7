"""The torch_xla names PyTorch/XLA's test_operations.py uses, mapped by lazyxla.compat
(docs/compat.md): devices read as upstream's, torch functions upstream patches, the
profiler, serialization, model comparator, DataParallel, utils and bindings."""
import os
import re

import pytest
import torch
import torch.nn.functional as F

import lazyxla as lx
import lazyxla.compat as compat
from helpers import assert_close


def test_devices_read_as_upstreams_and_back_after_uninstall(torch_xla):
    t = torch.ones(2, device="xla")
    assert t.device == torch_xla.device() and t.device.type == "xla" and str(t.device) == "xla:0"
    assert torch.device(t.device) == torch.device("xla", 0)
    assert (t + torch.ones(2, device=t.device)).device.type == "xla"   # the name read back is taken again
    assert "device='xla:0'" in str(t)
    assert lx.host_operands_enabled()
    assert_close((t + torch.arange(2.0)).cpu(), torch.tensor([1.0, 2.0]))   # upstream's CPU operand
    compat.uninstall()
    try:
        assert t.device == lx.device() and not lx.host_operands_enabled()
    finally:
        compat.install()


def test_clip_grad_norm_of_no_gradients_is_a_device_tensor(torch_xla):
    import torch_xla.core.xla_model as xm
    p = torch.zeros(3, device="xla", requires_grad=True)
    norm = torch.nn.utils.clip_grad_norm_([p], 1.0)
    assert xm.is_xla_tensor(norm) and norm.item() == 0.0
    p.grad = torch.tensor([3.0, 4.0, 0.0], device="xla")
    cpu = torch.zeros(3, requires_grad=True)
    cpu.grad = torch.tensor([3.0, 4.0, 0.0])
    assert_close(torch.nn.utils.clip_grad_norm_([p], 1.0).cpu(), torch.nn.utils.clip_grad_norm_([cpu], 1.0))
    assert_close(p.grad.cpu(), cpu.grad)
    compat.uninstall()
    try:
        assert torch.nn.utils.clip_grad_norm_([torch.zeros(1, requires_grad=True)], 1.0).device.type == "cpu"
        assert not getattr(torch.nn.utils.clip_grad_norm_, "__lazyxla_compat__", False)
    finally:
        compat.install()


def test_nll_loss_takes_a_floating_target_of_a_device_input(torch_xla):
    x = torch.randn(4, 3).log_softmax(-1)
    target = torch.tensor([0.0, 2.0, 1.0, 1.0])
    expected = F.nll_loss(x, target.long())
    assert_close(torch.nn.NLLLoss()(x.to("xla"), target.to("xla")).cpu(), expected)
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte"):
        F.nll_loss(x, target)   # CPU tensors: torch's own error


def test_profiler_scope_refuses_a_step_barrier(torch_xla):
    import torch_xla.debug.profiler as xp
    with pytest.raises(RuntimeError, match=r"Expecting scope to be empty but it is conv1\.\d+"):
        with xp.Trace("conv1"):
            torch_xla.sync()

    @xp.trace_me("conv2")
    def func():
        torch_xla.sync()
    with pytest.raises(RuntimeError, match="Expecting scope to be empty but it is conv2"):
        func()
    t = torch.ones(2, device="xla") * 2
    with xp.StepTrace("train_step", step_num=0):   # closes its scope, then the barrier
        t = t + 1
    torch_xla.sync()   # the scopes are closed again
    assert t.tolist() == [3.0, 3.0]


def test_serialization_writes_one_file_per_tensor_and_loads_cpu_tensors(torch_xla, tmp_path):
    import torch_xla.utils.serialization as xser
    model = torch.nn.Linear(3, 2).to("xla")
    path = str(tmp_path / "data.pt")
    xser.save({"state": model.state_dict(), "step": 7}, path)
    assert sorted(os.listdir(path + ".tensors")) == ["tensor_0.pt", "tensor_1.pt"]
    loaded = xser.load(path)
    assert loaded["step"] == 7
    for name, value in model.state_dict().items():
        assert loaded["state"][name].device.type == "cpu"
        assert_close(loaded["state"][name], value.cpu())


def test_model_comparator_reports_differing_tensors(torch_xla, tmp_path):
    import torch_xla.debug.model_comparator as mc
    for folder, scale in (("a", 1.0), ("b", 1.0), ("c", 2.0)):
        mc.configure(str(tmp_path / folder))
        os.makedirs(tmp_path / folder)
        x = torch.arange(4.0, device="xla")
        assert mc.save("layer", x * scale) is not None
        mc.save("layer", x)
    mc.configure(None)
    assert mc.compare(str(tmp_path / "a"), str(tmp_path / "b")) == ""
    report = mc.compare(str(tmp_path / "a"), str(tmp_path / "c"))
    assert 'Changes in saved tensor "layer" with id=0' in report and "[3]: 3.0 vs. 6.0" in report
    assert "id=1" not in report


def test_data_parallel_runs_the_loop_on_the_one_device(torch_xla):
    import torch_xla.distributed.data_parallel as dp
    import torch_xla.utils.utils as xu
    loader = xu.SampleGenerator(data=(torch.ones(2, 3), torch.zeros(2, dtype=torch.int64)), sample_count=3)
    seen = []

    def loop_fn(model, device_loader, device, context):
        assert context.getattr_or("calls", list) is context.calls
        for data, target in device_loader:
            seen.append(F.nll_loss(model(data).log_softmax(-1), target).item())
        return len(seen)

    parallel = dp.DataParallel(lambda: torch.nn.Linear(3, 2), device_ids=[torch_xla.device()])
    assert parallel(loop_fn, loader) == [3] and len(set(seen)) == 1
    assert parallel.models[0].weight.device == torch_xla.device()
    with pytest.raises(compat.UnsupportedError, match="DataParallel over 2 devices"):
        dp.DataParallel(torch.nn.Linear(3, 2), device_ids=["xla:0", "xla:1"])


def test_utils_walkers_arena_and_data_wrapper(torch_xla):
    import torch_xla.core.xla_model as xm
    import torch_xla.utils.utils as xu

    class Obj:
        def __init__(self):
            self.a = {"k": [1, 2], 4.5: "y"}

    shared = Obj()
    data = {2.5: 11, "w": [12, Obj(), shared], 123: shared}
    seen, rewritten = [], []
    xu.for_each_instance(data, lambda x: isinstance(x, (int, str, float)), lambda x: seen.append(x))
    xu.for_each_instance_rewrite(data, lambda x: isinstance(x, (int, str, float)),
                                 lambda x: rewritten.append(x) or x)
    assert seen == rewritten == [2.5, 11, "w", 12, "k", 1, 2, 4.5, "y", 123]

    nested = {"x": (torch.ones(2), [torch.zeros(3)]), "n": 3}
    moved = xm.ToXlaTensorArena(lambda ts: [t.to("xla") for t in ts], lambda v: type(v) is torch.Tensor)\
        .transform(nested)
    assert all(xm.is_xla_tensor(t) for t in (moved["x"][0], moved["x"][1][0])) and moved["n"] == 3

    class Pair(xu.DataWrapper):
        def __init__(self, a, b):
            self.a, self.b = a, b

        def get_tensors(self):
            return [self.a, self.b]

        def from_tensors(self, tensors):
            return Pair(*tensors)

    pair = xm.send_cpu_data_to_device(Pair(torch.ones(1), torch.zeros(1)), torch_xla.device())
    assert isinstance(pair, Pair) and xm.is_xla_tensor(pair.a) and xm.is_xla_tensor(pair.b)


def test_functions_all_reduce_has_upstreams_gradient(torch_xla):
    import torch_xla.core.functions as xf
    import torch_xla.core.xla_model as xm
    x = torch.arange(3.0, device="xla", requires_grad=True)
    y = xf.all_reduce(xm.REDUCE_SUM, x, scale=2.0)   # one replica: upstream's no-op, scale included
    y.sum().backward()
    assert_close(x.grad.cpu(), torch.full((3,), 2.0))


def test_patched_linear_matches_f_linear(torch_xla):
    import torch_xla.distributed.spmd as xs
    from torch_xla.distributed.fsdp.utils import apply_xla_patch_to_nn_linear
    cpu = torch.nn.Linear(2, 4)
    x = torch.randn(4, 3, 2, requires_grad=True)
    cpu(x).sum().backward()
    linear = torch.nn.Linear(2, 4).to("xla")
    linear.load_state_dict(cpu.state_dict())
    apply_xla_patch_to_nn_linear(linear, xs.xla_patched_nn_linear_forward)
    assert linear.forward.__func__ is xs.xla_patched_nn_linear_forward
    xd = x.detach().to("xla").requires_grad_()
    out = linear(xd)
    out.sum().backward()
    assert_close(out.cpu(), cpu(x).detach(), rtol=1e-5, atol=1e-5)
    assert_close(linear.weight.grad.cpu(), cpu.weight.grad, rtol=1e-5, atol=1e-5)
    assert_close(linear.bias.grad.cpu(), cpu.bias.grad, rtol=1e-5, atol=1e-5)
    assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


def test_bindings_of_test_operations(torch_xla):
    import torch_xla.debug.metrics as met
    X = torch_xla._XLAC
    assert X._get_xla_tensor_debug_info(torch.ones(2)) == "Not a XLATensor\n"
    t = torch.ones(5, device="xla") + 5
    info = X._get_xla_tensor_debug_info(t)
    assert "XLA Shape: f32[5]" in info and "aten::add" in info and "XLAData: None" in info
    torch_xla.sync()
    info = X._get_xla_tensor_debug_info(t)
    assert "Data Shape: f32[5]" in info and "IR: None" in info
    assert X._get_xla_tensor_shape_type(torch.ones(2, dtype=torch.half, device="xla") * 2) == "f16"
    nonzero = torch.nonzero(torch.tensor([0, 1, 2, 0, 3], device="xla"))
    assert X._get_xla_tensor_dimension_size(nonzero, 0).item() == 3
    assert all(re.fullmatch(r"[A-Z]+:\d+", d) for d in X._xla_real_devices(["xla:0"]))
    moved = X._xla_tensors_from_aten([torch.ones(1), torch.zeros(2)], ["xla:0", "xla:0"])
    assert [m.device.type for m in moved] == ["xla", "xla"]
    assert {"xla", "torch"} <= set(X._get_git_revs())
    X._init_xla_lazy_backend()
    X._init_xla_lazy_backend()
    assert met.counter_value("RegisterXLAFunctions") == 1
    X._xla_set_mat_mul_precision("high")
    assert lx.matmul_precision() == "high"
    X._xla_set_mat_mul_precision("highest")
    text = X._get_xla_tensors_text([torch.pow(torch.tensor([2.0, 3.0], device="xla"), 5)])
    assert text.split("\n")[1] == "  %0 = s64[] prim::Constant(), xla_shape=s64[], value=5"   # upstream's order
    assert "aten::pow(%1, %0)" in text


def test_mp_test_runs_the_test_in_a_child_process(torch_xla):
    import torch_xla.test.test_utils as xtu

    @xtu.mp_test
    def child(value):
        assert value == 3

    assert child(3) == 0


def test_optimizers_keep_their_multi_tensor_path_under_upstreams_device_name(torch_xla):
    from torch.optim.optimizer import _default_to_fused_or_foreach
    params = [torch.zeros(2, device="xla", requires_grad=True) for _ in range(3)]
    assert params[0].device.type == "xla"
    assert _default_to_fused_or_foreach(params, differentiable=False, use_fused=False) == (False, True)
    sgd = torch.optim.SGD(params, lr=0.1)
    for p in params:
        p.grad = torch.ones(2, device="xla")
    lx.metrics.clear_all()
    sgd.step()
    assert lx.metrics.counter_value("xla::_foreach_add_") == 1   # one op for the group
    for p in params:
        assert_close(p.cpu(), torch.full((2,), -0.1))
