"""Everyday tensor API on the lazyxla device: printing, pickling, numpy, copies."""
import copy
import io
import warnings

import pytest
import torch

import lazyxla as lx


def test_repr_shows_device_and_autograd(dev):
    x = torch.tensor([[1.5, 2.0]], device=dev, requires_grad=True)
    assert repr(x) == "tensor([[1.5000, 2.0000]], device='lazyxla:0', requires_grad=True)"
    assert "grad_fn=<SumBackward0>" in repr(x.sum())


def test_torch_save_and_load_state_dict(dev):
    model = torch.nn.Linear(3, 2).to(dev)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert all(v.device.type == "cpu" for v in loaded.values())
    torch.testing.assert_close(loaded["weight"], model.weight.detach().cpu())
    fresh = torch.nn.Linear(3, 2).to(dev)
    fresh.load_state_dict(loaded)
    torch.testing.assert_close(fresh.weight.detach().cpu(), loaded["weight"])


def test_lx_save_round_trip(dev, tmp_path):
    model = torch.nn.Linear(3, 2).to(dev)
    lx.save({"model": model.state_dict(), "step": 3}, tmp_path / "ckpt.pt")
    loaded = torch.load(tmp_path / "ckpt.pt")
    assert loaded["step"] == 3
    torch.testing.assert_close(loaded["model"]["bias"], model.bias.detach().cpu())


def test_numpy_needs_an_explicit_host_copy(dev):
    x = torch.arange(3.0, device=dev)
    with pytest.raises(TypeError, match="Tensor.cpu()"):
        x.numpy()
    assert x.numpy(force=True).tolist() == [0.0, 1.0, 2.0]
    assert x.cpu().numpy().tolist() == [0.0, 1.0, 2.0]


def test_deepcopy_and_python_scalars(dev):
    model = torch.nn.Linear(3, 2).to(dev)
    clone = copy.deepcopy(model)
    torch.testing.assert_close(clone.weight.detach().cpu(), model.weight.detach().cpu())
    with torch.no_grad():
        clone.weight.add_(1)
    assert not torch.equal(clone.weight.detach().cpu(), model.weight.detach().cpu())
    t = torch.tensor([2.5], device=dev)
    assert float(t) == 2.5 and int(t) == 2 and bool(t)


def test_data_assignment_follows_the_new_tensor(dev):
    p = torch.nn.Parameter(torch.zeros(3, device=dev))
    p.data = torch.ones(3, device=dev) * 4
    assert p.tolist() == [4.0, 4.0, 4.0]
    p.data.mul_(2)
    assert p.tolist() == [8.0, 8.0, 8.0]


@pytest.mark.parametrize("value", [8.313600540161133, -0.5, 3, 0, True])
def test_0d_tensor_formats_as_its_number(dev, value):
    """f"{loss:.4f}" in training logs: a 0-d tensor formats as its .item(), like on CPU."""
    cpu = torch.tensor(value)
    lazy = cpu.to(dev)
    specs = ["", ".4f", ".3e", ">10", "g"] if cpu.dtype != torch.bool else ["", ">6"]
    if cpu.dtype == torch.int64:
        specs += ["d", "05d", "x"]
    for spec in specs:
        assert format(lazy, spec) == format(cpu, spec), spec
    assert f"{lazy}" == f"{cpu}" and "{:.3f}".format(lazy.float()) == "{:.3f}".format(cpu.float())
    grad = torch.tensor(float(value), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # torch warns when .item() of a tensor requiring grad...
        assert f"{grad.to(dev) * 2:.2f}" == f"{grad * 2:.2f}"   # ...formatting does not
    # A lazy Parameter is a LazyTensor and formats as its number too (a CPU Parameter
    # raises TypeError: torch's check is `type(self) is Tensor`).
    param = torch.nn.Parameter(torch.tensor(float(value)).to(dev))
    assert f"{param:.3f}" == f"{float(value):.3f}"


def test_non_0d_tensor_formats_as_torch_does(dev):
    cpu = torch.tensor([1.5, 2.0])
    lazy = cpu.to(dev)
    assert f"{lazy}" == repr(lazy) and f"{cpu}" == repr(cpu)
    for t in (cpu, lazy):
        with pytest.raises(TypeError, match="unsupported format string"):
            format(t, ".4f")
