"""Storage dtype policy (runtime/storage_dtypes.py, `lx.set_storage_dtypes`): tensors keep
their torch dtype while the device holds, and computes in, a narrower one. Buffers are
checked by their JAX array's dtype; values against eager PyTorch computed in the narrow
type and cast back. Also PyTorch/XLA's XLA_USE_BF16 / XLA_DOWNCAST_BF16 /
XLA_USE_32BIT_LONG and `_get_xla_tensors_text` through lazyxla.compat."""
from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch

import lazyxla as lx
import lazyxla.compat as compat
from lazyxla import config, workloads
from lazyxla.runtime import storage_dtypes
from helpers import matmul_tolerance, run_on_host_devices

BF16 = {torch.float32: torch.bfloat16, torch.float64: torch.bfloat16}


@pytest.fixture
def policy():
    """Sets a policy for the test; the previous one comes back after."""
    previous = lx.storage_dtypes()
    yield lx.set_storage_dtypes
    lx.set_storage_dtypes(previous)


def buffer(t: torch.Tensor):
    """The device data behind `t` (synced first)."""
    lx.sync_tensors([t])
    return t.lazy_value().data


def narrow(t: torch.Tensor, storage: torch.dtype) -> torch.Tensor:
    """Eager's value of `t` held in `storage` and read back in its own dtype."""
    return t.to(storage).to(t.dtype)


def test_transfer_holds_the_narrow_type_and_reads_back_the_logical_one(dev, policy):
    policy(BF16)
    for dtype in (torch.float32, torch.float64):
        host = torch.randn(4, 3, dtype=dtype)
        x = host.to(dev)
        data = buffer(x)
        assert x.dtype == dtype and data.dtype == dtype and data.stored_dtype == torch.bfloat16
        assert data.array.dtype == np.dtype("bfloat16")
        assert data.nbytes == host.numel() * 2          # the memory ledger charges 2 bytes
        back = x.cpu()
        assert back.dtype == dtype and torch.equal(back, narrow(host, torch.bfloat16))
        assert torch.equal(x[1:3, 1].cpu(), narrow(host, torch.bfloat16)[1:3, 1])   # a view read
    assert buffer(torch.arange(3).to(dev)).stored_dtype == torch.int64                  # not in the policy


def test_graphs_compute_in_the_storage_type_as_eager_bf16(dev, policy):
    policy(BF16)
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    x, y = a.to(dev), b.to(dev)
    ab, bb = a.bfloat16(), b.bfloat16()
    cases = {
        "mul_add": (x * y + 1.5, ab * bb + 1.5),
        "sin_exp": (torch.sin(x) * torch.exp(y), torch.sin(ab) * torch.exp(bb)),
        "div_floor": (torch.floor_divide(x, y), torch.floor_divide(ab, bb)),
        "factory": (x + torch.ones(8, 16, device=dev) / 3, ab + torch.ones(8, 16, dtype=torch.bfloat16) / 3),
    }
    for name, (lazy, eager) in cases.items():
        data = buffer(lazy)
        assert lazy.dtype == torch.float32 and data.array.dtype == np.dtype("bfloat16"), name
        if lx.platform() == "cpu":
            assert torch.equal(lazy.cpu(), eager.float()), name
        else:   # a TPU fuses x * y + 1.5 without rounding the product to bf16: an ulp apart
            torch.testing.assert_close(lazy.cpu(), eager.float(), rtol=2 ** -7, atol=2 ** -7, msg=name)
    # reductions and matmuls accumulate in float32 in both; the results are bf16-rounded
    for lazy, eager in ((x @ y.T, ab @ bb.T), (x.sum(1), ab.sum(1)), (torch.softmax(x, 1), torch.softmax(ab, 1))):
        assert buffer(lazy).stored_dtype == torch.bfloat16
        torch.testing.assert_close(lazy.cpu(), eager.float(), rtol=1e-2, atol=1e-2)
        assert torch.equal(narrow(lazy.cpu(), torch.bfloat16), lazy.cpu())   # bf16 values


def test_int64_held_as_int32_wraps_as_int32(dev, policy):
    policy({torch.int64: torch.int32, torch.uint64: torch.uint32})
    host = torch.tensor([2**31 - 1, -7, 5])
    x = host.to(dev)
    assert buffer(x).array.dtype == np.dtype("int32") and x.dtype == torch.int64
    y = x + 1
    assert buffer(y).array.dtype == np.dtype("int32")
    assert torch.equal(y.cpu(), (host.to(torch.int32) + 1).to(torch.int64))      # 2**31-1 + 1 wraps
    u = torch.tensor([3, 2**32 - 1], dtype=torch.uint64).to(dev)
    assert buffer(u).array.dtype == np.dtype("uint32") and u.dtype == torch.uint64
    assert u.cpu().tolist() == [3, 2**32 - 1]


def _train(model, x, t, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()
        lx.sync()


def test_training_equals_a_bf16_model(dev, policy):
    """A float32 model under the bf16 policy trains bit for bit as the same model made
    bfloat16 on lazyxla, and within a bf16 rounding of eager's bfloat16 model (mse_loss's
    backward rounds at other points than eager's fused kernel, with or without a policy)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    eager = copy.deepcopy(model).bfloat16()
    explicit = copy.deepcopy(model).bfloat16().to(dev)
    x, t = torch.randn(4, 6), torch.randn(4, 3)
    policy(BF16)
    lazy = model.to(dev)
    _train(lazy, x.to(dev), t.to(dev))
    policy(None)
    _train(explicit, x.bfloat16().to(dev), t.bfloat16().to(dev))
    _train(eager, x.bfloat16(), t.bfloat16())
    for p_l, p_x, p_e in zip(lazy.parameters(), explicit.parameters(), eager.parameters()):
        assert p_l.dtype == torch.float32 and buffer(p_l).stored_dtype == torch.bfloat16
        assert torch.equal(p_l.detach().cpu(), p_x.detach().cpu().float())
        torch.testing.assert_close(p_l.detach().cpu(), p_e.detach().float(), rtol=0, atol=4e-3)


def _w2_losses_lazy_and_eager(dev, steps: int = 3) -> tuple:
    """W2's model (lazyxla/workloads.py: token and position embeddings, causal attention,
    cross-entropy over token ids, AdamW) at a small size: its losses on `dev` and eager's,
    its token ids, and the HLO of its second step's forward and backward."""
    torch.manual_seed(0)
    cfg = workloads.GPTConfig(vocab=64, d=32, heads=2, layers=2, seq=16)
    ref = workloads.GPT(cfg)
    lazy = copy.deepcopy(ref).to(dev)
    tokens = torch.randint(0, cfg.vocab, (2, cfg.seq + 1))
    wl = workloads.Workload("gpt", ref, tokens[:, :-1], tokens[:, 1:])
    opt_ref, opt_lazy = wl.optimizer(ref.parameters()), wl.optimizer(lazy.parameters())
    x, y = wl.inputs.to(dev), wl.targets.to(dev)
    got, exp = [], []
    for step in range(steps):
        for model, opt, inputs, targets, out in ((ref, opt_ref, wl.inputs, wl.targets, exp),
                                                 (lazy, opt_lazy, x, y, got)):
            opt.zero_grad()
            loss = wl.loss(model, inputs, targets)
            loss.backward()
            if step == 1 and model is lazy:
                text = lx.debug.hlo_text()
            opt.step()
            out.append(loss.item())
    return got, exp, x, text


def _s64_arrays(hlo: str) -> list:
    """HLO instructions with a 64-bit integer array (scalar parameters aside: Python ints)."""
    return [line for line in hlo.splitlines() if re.search(r"[su]64\[\d", line)]


def test_w2_with_int64_held_as_int32_trains_like_eager(dev, policy):
    """LAZYXLA_STORAGE_DTYPES="int64=int32": token ids and every index computation in 32
    bits (64-bit integers are emulated on a TPU), the same losses as eager's int64 run."""
    policy({torch.int64: torch.int32})
    got, exp, tokens, hlo = _w2_losses_lazy_and_eager(dev)
    assert tokens.dtype == torch.int64 and buffer(tokens).array.dtype == np.dtype("int32")
    assert _s64_arrays(hlo) == []
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp),
                               **matmul_tolerance(torch.tensor(exp), rtol=1e-5, atol=1e-5, level=lx.matmul_precision()))
    policy(None)
    assert _s64_arrays(_w2_losses_lazy_and_eager(dev, steps=2)[3])   # without: int64 indices


def test_the_policy_is_part_of_the_graph_key(dev, policy, fresh_compile_cache):
    def step():
        out = torch.ones(5, device=dev) * 3
        lx.sync()
        return out
    step()
    compiles = lx.metrics.counter_value("UncachedCompile")
    policy(BF16)
    out = step()
    assert lx.metrics.counter_value("UncachedCompile") == compiles + 1
    assert "another storage dtype policy" in lx.debug.explain_last_compile()
    assert buffer(out).stored_dtype == torch.bfloat16
    step()
    policy(dict(BF16))      # an equal mapping: the same executables
    step()
    assert lx.metrics.counter_value("UncachedCompile") == compiles + 1


def test_buffers_keep_their_storage_and_graphs_compute_in_the_current_policy(dev, policy):
    host = torch.randn(6)
    policy(BF16)
    x = host.to(dev)
    policy(None)
    y = x + 1                                           # float32 again: x enters widened
    assert buffer(y).stored_dtype == torch.float32 and buffer(x).stored_dtype == torch.bfloat16
    assert torch.equal(y.cpu(), narrow(host, torch.bfloat16) + 1)
    z = host.to(dev)                                    # float32
    policy(BF16)
    w = z * 2
    assert buffer(w).stored_dtype == torch.bfloat16
    assert torch.equal(w.cpu(), (host.bfloat16() * 2).float())


def test_a_function_policy_is_asked_once_per_dtype(dev, policy):
    asked = []

    def rule(dtype):
        asked.append(dtype)
        return torch.bfloat16 if dtype == torch.float32 else dtype
    policy(rule)
    for _ in range(2):
        x = torch.randn(3).to(dev)
        n = torch.arange(3).to(dev)
        lx.sync_tensors([x * 2, n + 1])
    assert sorted(map(str, asked)) == ["torch.float32", "torch.int64"]
    assert buffer(x).stored_dtype == torch.bfloat16


def test_bad_policies_are_refused_with_the_allowed_narrowings():
    default = lx.storage_dtypes()   # none on CPU; the TPU's 64-bit rule there
    with pytest.raises(ValueError, match="float32 -> bfloat16/float16"):
        lx.set_storage_dtypes({torch.float32: torch.float64})
    with pytest.raises(ValueError, match="not a narrowing"):
        lx.set_storage_dtypes({torch.int64: torch.int16})
    policy = storage_dtypes.StoragePolicy(lambda d: torch.int8)
    with pytest.raises(ValueError, match="int64"):
        policy.storage(torch.int64)
    with pytest.raises(ValueError, match="float32=bfloat16"):
        storage_dtypes.parse("float32:bfloat16")
    assert lx.storage_dtypes() is default


def test_the_setting_gives_the_initial_policy():
    assert storage_dtypes.parse(" float32=bfloat16, int64=int32 ") == {torch.float32: torch.bfloat16,
                                                                       torch.int64: torch.int32}
    from lazyxla.state import FROM_SETTINGS, STATE
    with STATE.scoped(storage_dtypes=FROM_SETTINGS), config.override(storage_dtypes="float64=float32"):
        initial = lx.storage_dtypes()   # read through the settings at use
    assert initial.storage(torch.float64) == torch.float32 and initial.storage(torch.float32) == torch.float32


def test_ir_nodes_show_device_dtypes(dev, policy):
    policy(BF16)
    x = torch.randn(2, 3).to(dev)
    nodes = lx.debug.ir_nodes([x * 2.0, x])
    assert [n.op for n in nodes] == ["lazyxla::data", "lazyxla::scalar", "aten::mul.Tensor"]
    data, scalar, mul = nodes
    assert (data.dtype, data.device_dtype, data.roots) == (torch.float32, torch.bfloat16, (1,))
    assert (mul.dtype, mul.device_dtype, mul.operands, mul.roots) == (torch.float32, torch.bfloat16, (0, 1), (0,))
    assert (scalar.device_dtype, scalar.value) == (torch.float64, 2.0)


# -- PyTorch/XLA's variables and IR text (lazyxla.compat) ------------------------------

@pytest.fixture
def torch_xla(monkeypatch, policy):
    """A fresh process's view of the upstream variables: none read yet."""
    for name in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_32BIT_LONG"):
        monkeypatch.delenv(name, raising=False)
    compat.install()
    import torch_xla
    from lazyxla.compat.torch_xla import _dtype_env
    _dtype_env._flag.cache_clear()
    policy(None)
    _dtype_env.install()
    yield torch_xla
    _dtype_env._flag.cache_clear()
    compat.uninstall()
    assert lx.storage_dtypes() is None


def device_type() -> str:
    """The device name upstream's IR text gives this platform's devices (CPU, TPU)."""
    from lazyxla.compat.torch_xla.runtime import device_type as upstream_device_type
    return upstream_device_type()


def _device_line(torch_xla, dtype, op):
    t1 = torch.tensor([2, 3], dtype=dtype, device="xla")
    t2 = torch.tensor([2, 3], dtype=dtype, device="xla")
    return torch_xla._XLAC._get_xla_tensors_text([op(t1, t2)]).split("\n")


@pytest.mark.filterwarnings("ignore:XLA_")
def test_upstream_use_bf16_is_read_at_the_first_tensor_and_kept(torch_xla, monkeypatch):
    monkeypatch.setenv("XLA_USE_BF16", "1")            # after import, as upstream's test does
    lines = _device_line(torch_xla, torch.double, torch.floor_divide)
    assert lines[0] == "IR {" and lines[-2:] == ["}", ""]
    assert lines[1] == f"  %0 = bf16[2]{{0}} xla::device_data(), xla_shape=bf16[2]{{0}}, device={device_type()}:0"
    assert lines[3].startswith("  %2 = bf16[2]{0} aten::div(%1, %0), xla_shape=bf16[2]{0}") \
        and lines[3].endswith("ROOT=0")
    monkeypatch.delenv("XLA_USE_BF16")                 # read once: still bf16, as upstream
    x = torch.tensor([1.0, 2.0], device="xla")
    assert buffer(x).array.dtype == np.dtype("bfloat16") and x.cpu().dtype == torch.float32


@pytest.mark.filterwarnings("ignore:XLA_")
def test_upstream_downcast_bf16_holds_double_as_float(torch_xla, monkeypatch):
    monkeypatch.setenv("XLA_DOWNCAST_BF16", "1")
    assert "f32[2]{0} xla::device_data()" in _device_line(torch_xla, torch.double, torch.add)[2]
    assert "bf16[2]{0} xla::device_data()" in _device_line(torch_xla, torch.float, torch.add)[2]


@pytest.mark.filterwarnings("ignore:XLA_")
def test_upstream_32bit_long(torch_xla, monkeypatch):
    monkeypatch.setenv("XLA_USE_32BIT_LONG", "1")
    assert "s32[2]{0} xla::device_data()" in _device_line(torch_xla, torch.int64, torch.add)[2]
    assert "u32[2]{0} xla::device_data()" in _device_line(torch_xla, torch.uint64, torch.add)[2]
    x = torch.tensor([2**31 - 1], device="xla")
    assert (x + 1).cpu().tolist() == [-2**31]


@pytest.mark.filterwarnings("ignore:XLA_")
def test_upstream_32bit_long_trains_w2_like_eager(torch_xla, monkeypatch):
    monkeypatch.setenv("XLA_USE_32BIT_LONG", "1")
    got, exp, tokens, hlo = _w2_losses_lazy_and_eager(torch_xla.device())
    assert buffer(tokens).array.dtype == np.dtype("int32") and _s64_arrays(hlo) == []
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp),
                               **matmul_tolerance(torch.tensor(exp), rtol=1e-5, atol=1e-5, level=lx.matmul_precision()))


def test_ir_text_of_device_data_and_multi_output_nodes(torch_xla):
    w = torch.ones(10, 5, dtype=torch.bfloat16).to("xla")
    assert torch_xla._XLAC._get_xla_tensors_text([w]).split("\n")[-3] == \
        f"  %0 = bf16[10,5]{{1,0}} xla::device_data(), xla_shape=bf16[10,5]{{1,0}}, device={device_type()}:0, ROOT=0"
    values, index = torch.max(w, 1)
    text = torch_xla._XLAC._get_xla_tensors_text([index, values + 1])
    index = "s64" if storage_dtypes.storage_for(torch.int64) == torch.int64 else "s32"   # the TPU's 64-bit rule
    assert f"(bf16[10]{{0}}, {index}[10]{{0}}) aten::max(%0), xla_shape=(bf16[10]{{0}}, {index}[10]{{0}}), ROOT=0" in text
    assert "aten::add(%1.0, %2)" in text


_SPMD_SCRIPT = """
import torch, lazyxla as lx
lx.spmd.use_spmd()
lx.set_storage_dtypes({torch.float32: torch.bfloat16})
mesh = lx.spmd.Mesh(range(8), (8,), ("x",))
host = torch.randn(8, 16)
w = lx.spmd.mark_sharding(host.to(lx.device()), mesh, ("x", None))
y = (w * 3).sum(0)
lx.sync()
data = w.lazy_value().data
assert (str(data.array.dtype), data.array.sharding.spec[0]) == ("bfloat16", "x"), data
assert str(y.lazy_value().data.array.dtype) == "bfloat16"
assert torch.equal(y.cpu(), (host.bfloat16() * 3).sum(0).float())
assert torch.equal(torch.cat(lx.spmd.local_shards(w)), host.bfloat16().float())
print("OK")
"""


def test_spmd_uploads_place_the_narrow_shards():
    """SPMD stages uploads on the host (DeviceData.host): the staged copy is the narrow one."""
    out = run_on_host_devices(_SPMD_SCRIPT)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
