"""Mixed precision on the lazyxla device: torch.autocast("lazyxla") and
torch.amp.GradScaler("lazyxla"), value by value against eager CPU autocast."""
import copy
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lazyxla as lx
from helpers import assert_close, counter, host_fallbacks, rand
from lazyxla.frontend.autocast_lists import AutocastListsError, read_lists

LOW = [torch.bfloat16, torch.float16]
# one bf16/fp16 rounding of a result of magnitude ~1, and a little accumulation order
TOL = {torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _both(fn, dtype, *hosts, dev):
    """fn under CPU autocast on `hosts` and under lazyxla autocast on device copies."""
    with torch.autocast("cpu", dtype=dtype):
        expected = fn(*hosts)
    with torch.autocast("lazyxla", dtype=dtype):
        actual = fn(*(h.to(dev) for h in hosts))
    return actual, expected


def _assert_same(actual, expected, dtype):
    assert actual.dtype == expected.dtype, f"{actual.dtype} != {expected.dtype}"
    torch.testing.assert_close(actual.cpu().float(), expected.float(), **TOL[dtype])


# -- the device module ---------------------------------------------------------------------

def test_device_module_answers_what_torch_asks():
    mod = torch.get_device_module("lazyxla")
    assert mod is torch.lazyxla
    assert mod.is_available() and mod.device_count() == lx.device_count()
    assert mod.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert mod.is_bf16_supported() and mod.current_device() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # torch warns when the module lacks the seed hooks
        torch.manual_seed(0)


def test_unsupported_dtype_warns_and_disables_like_cpu(dev):
    with pytest.warns(UserWarning, match="lazyxla Autocast only supports dtypes of torch.bfloat16, "
                                         "torch.float16"):
        with torch.autocast("lazyxla", dtype=torch.float64):
            assert not torch.is_autocast_enabled("lazyxla")
            y = rand(4, 4).to(dev) @ rand(4, 4).to(dev)
    assert y.dtype == torch.float32
    with pytest.warns(UserWarning, match="CPU Autocast only supports dtypes of"):
        with torch.autocast("cpu", dtype=torch.float64):
            pass


def test_every_op_of_pytorchs_lists_has_a_lazyxla_autocast_kernel():
    lists = read_lists()
    assert len(lists) > 100 and ("mm", "lower_precision_fp") in lists and ("mse_loss", "fp32") in lists
    for name, _ in lists:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "AutocastPrivateUse1"), name
    with pytest.raises(AutocastListsError, match="needs the headers that the torch wheel ships"):
        read_lists(Path("/nonexistent/autocast_mode.h"))


# -- op by op against CPU autocast ---------------------------------------------------------

LOWER_PRECISION_OPS = {
    "mm": (lambda a, b: a @ b, (8, 16), (16, 12)),
    "linear": (lambda x, w, b: F.linear(x, w, b), (4, 16), (12, 16), (12,)),
    "bmm": (torch.bmm, (3, 4, 8), (3, 8, 5)),
    "matmul_3d": (torch.matmul, (2, 4, 8), (8, 6)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (2, 3, 8, 8), (4, 3, 3, 3), (4,)),
    "addmm": (torch.addmm, (4, 6), (4, 8), (8, 6)),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", sorted(LOWER_PRECISION_OPS))
def test_lower_precision_ops_match_cpu_autocast(name, dtype, dev):
    fn, *shapes = LOWER_PRECISION_OPS[name]
    actual, expected = _both(fn, dtype, *(rand(*s, seed=i) for i, s in enumerate(shapes)), dev=dev)
    assert expected.dtype == dtype
    _assert_same(actual, expected, dtype)
    assert host_fallbacks() == []


FP32_OPS = {  # in both PyTorch's shared lists and CPU's: float32 out of low-precision inputs
    "mse_loss": lambda y, t: F.mse_loss(y, t),
    "l1_loss": lambda y, t: F.l1_loss(y, t),
    "cross_entropy": lambda y, t: F.cross_entropy(y, t.argmax(-1)),
    "bce_with_logits": lambda y, t: F.binary_cross_entropy_with_logits(y, t.sigmoid()),
    "softmax_of_fp32": lambda y, t: torch.softmax(t, -1),
    "layer_norm_of_fp32": lambda y, t: F.layer_norm(t, (12,)),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", sorted(FP32_OPS))
def test_float32_ops_match_cpu_autocast(name, dtype, dev):
    # y = the low-precision output of a matmul, as in a model; t stays float32
    fn = FP32_OPS[name]
    actual, expected = _both(lambda a, b, t: fn(a @ b, t), dtype, rand(4, 8), rand(8, 12), rand(4, 12), dev=dev)
    assert expected.dtype == torch.float32
    _assert_same(actual, expected, dtype)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_softmax_and_layer_norm_follow_the_shared_lists_not_cpus(dtype, dev):
    """Where CPU autocast's own lists differ from PyTorch's shared ones (used by CUDA,
    XPU and lazyxla), lazyxla runs float32 like CUDA: softmax and layer_norm of a
    low-precision input give float32, equal to CPU computing them on the upcast input."""
    a, b = rand(4, 8), rand(8, 12)
    with torch.autocast("cpu", dtype=dtype):
        y = a @ b
        assert torch.softmax(y, -1).dtype == dtype        # CPU keeps them low precision
    for fn in (lambda y: torch.softmax(y, -1), lambda y: F.layer_norm(y, (12,)), lambda y: y.sum()):
        with torch.autocast("lazyxla", dtype=dtype):
            y_dev = a.to(dev) @ b.to(dev)
            got = fn(y_dev)
        assert got.dtype == torch.float32
        # on the device's own low-precision product: a TPU may round it an ulp apart from CPU's
        assert_close(got, fn(y_dev.cpu().float()), rtol=1e-5, atol=1e-5)


def test_cross_entropy_takes_log_softmax_in_low_precision_like_cuda(dev):
    """CPU autocast lists cross_entropy_loss as float32; CUDA's (shared) lists do not, so
    cross_entropy_loss's own log_softmax(x, dtype=x.dtype) runs in bf16 and nll_loss
    (a float32 op) reads its rounded result: float32 out, bf16-rounded log-probabilities."""
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::cross_entropy_loss", "AutocastCPU")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::cross_entropy_loss", "AutocastCUDA")
    y, t = rand(64, 10).bfloat16(), torch.arange(64) % 10
    with torch.autocast("lazyxla", dtype=torch.bfloat16):
        got = F.cross_entropy(y.to(dev), t.to(dev))
    assert got.dtype == torch.float32
    expected = F.nll_loss(torch.log_softmax(y, -1).float(), t)     # eager, without autocast
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-3, atol=1e-4)


def test_policies_explicit_dtype_promote_and_double(dev):
    a, b = rand(4, 8).to(dev), rand(8, 4).to(dev)
    with torch.autocast("lazyxla", dtype=torch.bfloat16):
        y = a @ b
        assert y.sum(dtype=torch.bfloat16).dtype == torch.bfloat16       # explicit dtype= wins
        assert torch.softmax(y, 0, dtype=torch.float64).dtype == torch.float64
        assert torch.addcmul(y, y, y).dtype == torch.bfloat16            # promote: all low
        assert torch.addcmul(a[:, :4], y, y).dtype == torch.float32      # promote: widest
        assert (a.double() @ b.double()).dtype == torch.float64          # float64 never cast
        assert torch.norm(y).dtype == torch.float32                      # fp32_append_dtype
        with pytest.raises(RuntimeError, match="float16 input inside a torch.bfloat16 autocast region"):
            torch.addcmul(y, y, y.half())
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(y.sigmoid(), y.sigmoid())
        with torch.autocast("lazyxla", enabled=False):
            assert (a @ b).dtype == torch.float32
    assert (a @ b).dtype == torch.float32
    assert host_fallbacks() == []


# -- training ------------------------------------------------------------------------------

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 5))


def _convnet():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 4 * 4, 5))


MODELS = {"mlp": (_mlp, (16, 16)), "convnet": (_convnet, (8, 3, 8, 8))}
OPTS = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2)}


def _train(model, opt, x, y, steps, dtype, scaler=None, sync=None, after_backward=None):
    device = x.device.type
    losses = []
    for step in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            if after_backward is not None:
                after_backward(step, model)
            scaler.step(opt)
            scaler.update()
        if sync:
            sync()
        losses.append(loss)
    return [float(loss.item()) for loss in losses]


@pytest.mark.parametrize("opt", sorted(OPTS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_bf16_training_matches_cpu_autocast(model, opt, dev):
    make, xshape = MODELS[model]
    ref = make()
    lazy = copy.deepcopy(ref).to(dev)
    x, y = rand(*xshape), torch.arange(xshape[0]) % 5
    exp = _train(ref, OPTS[opt](ref.parameters()), x, y, 4, torch.bfloat16)
    got = _train(lazy, OPTS[opt](lazy.parameters()), x.to(dev), y.to(dev), 4, torch.bfloat16, sync=lx.sync)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp), rtol=2e-2, atol=2e-2)
    assert exp[-1] < exp[0] and got[-1] < got[0]
    # Adam moves each element by about lr whatever the gradient's size, so an element whose
    # tiny gradient rounds to the other sign in bf16 can be 2 lr apart per step.
    atol = 2e-2 if opt == "sgd" else 4 * 2 * 1e-2
    for pr, pl in zip(ref.parameters(), lazy.parameters()):
        assert pl.dtype == torch.float32   # autocast never changes the parameters' dtype
        torch.testing.assert_close(pl.detach().cpu(), pr.detach(), rtol=5e-2, atol=atol)
    assert host_fallbacks() == []


def test_bf16_steady_state_compiles_nothing(dev):
    lazy = _mlp().to(dev)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    x, y = rand(16, 16).to(dev), (torch.arange(16) % 5).to(dev)
    _train(lazy, opt, x, y, 2, torch.bfloat16, sync=lx.sync)
    lx.metrics.clear_counters()
    _train(lazy, opt, x, y, 3, torch.bfloat16, sync=lx.sync)
    assert counter("UncachedCompile") == 0 and counter("CachedCompile") == 3
    assert host_fallbacks() == []


def test_bf16_casts_take_the_cast_path_and_change_no_value(dev, monkeypatch):
    """Autocast's casts and their gradients' casts back (frontend/handlers.py `_cast`): in a
    steady step each is one shape-inference hit, with no pass of `convert_call` over its
    arguments, and the results are bit for bit those of the generic path."""
    from lazyxla.frontend import handlers, primitives, tracing

    ref = _mlp()
    x, y = rand(16, 16).to(dev), (torch.arange(16) % 5).to(dev)

    def train(model, opt):
        losses = _train(model, opt, x, y, 3, torch.bfloat16, sync=lx.sync)
        return losses, [p.detach().cpu() for p in model.parameters()]

    fast = copy.deepcopy(ref).to(dev)
    fast_opt = torch.optim.AdamW(fast.parameters(), lr=1e-2)
    fast_losses, fast_params = train(fast, fast_opt)
    converted = []
    generic_convert = tracing.convert_call
    monkeypatch.setattr(tracing, "convert_call",
                        lambda info, *rest: converted.append(info.name) or generic_convert(info, *rest))
    entries = len(tracing.META_CACHE)
    lx.metrics.clear_counters()
    lx.metrics.set_op_records(True)
    try:
        train(fast, fast_opt)
    finally:
        lx.metrics.set_op_records(False)
    assert counter("xla::_to_copy") >= 3 * 6   # each step: 3 weights and the input cast, 2 grads back
    assert "_to_copy" not in converted and len(tracing.META_CACHE) == entries

    monkeypatch.setattr(handlers, "_cast", lambda func, info, t, kwargs:
                        primitives.functional(func, info, (t,), kwargs))
    generic = copy.deepcopy(ref).to(dev)
    generic_losses, generic_params = train(generic, torch.optim.AdamW(generic.parameters(), lr=1e-2))
    assert fast_losses == generic_losses
    assert all(torch.equal(a, b) for a, b in zip(fast_params, generic_params))


# -- GradScaler ----------------------------------------------------------------------------

def _poison(inf_step):
    def after_backward(step, model):
        if step == inf_step:
            with torch.no_grad():
                model[0].weight.grad[0, 0] = float("inf")
    return after_backward


@pytest.mark.parametrize("opt", sorted(OPTS))
def test_grad_scaler_fp16_matches_cpu_and_skips_inf_step(opt, dev):
    ref = _mlp()
    lazy = copy.deepcopy(ref).to(dev)
    x, y = rand(16, 16), torch.arange(16) % 5
    kw = dict(init_scale=2.0 ** 12, growth_interval=2)    # grows after 2 good steps
    cpu_scaler, lazy_scaler = torch.amp.GradScaler("cpu", **kw), torch.amp.GradScaler("lazyxla", **kw)
    cpu_opt, lazy_opt = OPTS[opt](ref.parameters()), OPTS[opt](lazy.parameters())
    scales = []

    def run(model, o, s, xs, ys, sync, steps, inf_step):
        out = []
        for i in range(steps):
            out += _train(model, o, xs, ys, 1, torch.float16, scaler=s, sync=sync,
                          after_backward=_poison(0 if i == inf_step else -1))
            scales.append(s.get_scale())
        return out

    exp = run(ref, cpu_opt, cpu_scaler, x, y, None, 6, inf_step=3)
    cpu_scales, scales[:] = list(scales), []
    got = run(lazy, lazy_opt, lazy_scaler, x.to(dev), y.to(dev), lx.sync, 6, inf_step=3)
    assert scales == cpu_scales          # exactly: 4096, 8192 (grown), 8192, 4096 (backed off), ...
    assert cpu_scales[2:4] == [2.0 ** 13, 2.0 ** 12]
    assert lazy_scaler._get_growth_tracker() == cpu_scaler._get_growth_tracker()
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp), **TOL[torch.float16])
    for pr, pl in zip(ref.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pr.detach(), rtol=5e-3, atol=5e-3)
    assert host_fallbacks() == []


def test_grad_scaler_skipped_step_leaves_parameters_unchanged(dev):
    lazy = _mlp().to(dev)
    opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("lazyxla", init_scale=2.0 ** 10)
    x, y = rand(16, 16).to(dev), (torch.arange(16) % 5).to(dev)
    _train(lazy, opt, x, y, 1, torch.float16, scaler=scaler, sync=lx.sync)
    before = [p.detach().cpu().clone() for p in lazy.parameters()]
    _train(lazy, opt, x, y, 1, torch.float16, scaler=scaler, sync=lx.sync, after_backward=_poison(0))
    assert scaler.get_scale() == 2.0 ** 9
    for b, p in zip(before, lazy.parameters()):
        assert torch.equal(p.detach().cpu(), b)


def test_grad_scaler_steady_state_two_graphs_per_step(dev):
    """GradScaler.step reads found_inf on the host: one graph up to the read (forward,
    backward, unscale), one at lx.sync (optimizer step, scale update); the forward
    pass is never computed twice, and nothing compiles after warm-up."""
    lazy = _mlp().to(dev)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("lazyxla")
    x, y = rand(16, 16).to(dev), (torch.arange(16) % 5).to(dev)
    _train(lazy, opt, x, y, 2, torch.float16, scaler=scaler, sync=lx.sync)
    pending_at_step = []
    opt.register_step_pre_hook(lambda *_: pending_at_step.append(lx.debug.ir_text()))
    lx.metrics.clear_all()
    _train(lazy, opt, x, y, 3, torch.float16, scaler=scaler, sync=lx.sync)
    # the read of found_inf materialised loss, activations and gradients in its graph
    assert pending_at_step == ["(nothing pending)"] * 3
    assert counter("UncachedCompile") == 0 and counter("CachedCompile") == 6
    assert lx.metrics.metric_data("ExecuteTime")[0] == 6
    assert host_fallbacks() == []


def test_grad_scaler_ops_are_traced_not_run_on_host(dev):
    grads = [rand(3, 4).to(dev), rand(5).to(dev)]
    found, inv = torch.zeros((), device=dev), torch.full((), 0.25, device=dev)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    lx.sync()
    assert found.item() == 0.0
    torch.testing.assert_close(grads[0].cpu(), rand(3, 4) * 0.25)
    grads[1][2] = float("nan")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 1.0
    scale, tracker = torch.full((), 8.0, device=dev), torch.zeros((), dtype=torch.int32, device=dev)
    torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3)
    assert scale.item() == 4.0 and tracker.item() == 0
    assert host_fallbacks() == []
    with pytest.raises(RuntimeError, match="found_inf must be a 1-element float32 tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, torch.zeros(2, device=dev), inv)


# -- fused optimizers: GradScaler without the host read -------------------------------------

FUSED = {"adam_amsgrad_wd": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-2, amsgrad=True, fused=True),
         "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=1e-1, fused=True),
         "adamw_tensor_lr": lambda p: torch.optim.AdamW(p, lr=torch.tensor(1e-2), fused=True),
         "sgd_nesterov_wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3,
                                                      fused=True)}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_optimizers_match_cpu_fused_kernels(name, dev):
    ref = _mlp()
    lazy = copy.deepcopy(ref).to(dev)
    x, y = rand(16, 16), torch.arange(16) % 5
    exp = _train(ref, FUSED[name](ref.parameters()), x, y, 3, torch.bfloat16)
    got = _train(lazy, FUSED[name](lazy.parameters()), x.to(dev), y.to(dev), 3, torch.bfloat16, sync=lx.sync)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp), rtol=2e-2, atol=2e-2)
    with torch.no_grad():   # one float32 step from equal parameters and gradients: kernel against kernel
        for pr, pl in zip(ref.parameters(), lazy.parameters()):
            pl.copy_(pr.to(dev))
            pr.grad = rand(*pr.shape, seed=7)
            pl.grad = pr.grad.to(dev)
    cpu_opt, lazy_opt = FUSED[name](ref.parameters()), FUSED[name](lazy.parameters())
    cpu_opt.step()
    lazy_opt.step()
    for pr, pl in zip(ref.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pr.detach(), rtol=1e-5, atol=1e-6)
    assert host_fallbacks() == []


@pytest.mark.parametrize("name", ["adamw", "sgd_nesterov_wd"])
def test_grad_scaler_with_fused_optimizer_is_one_graph_per_step(name, dev):
    """A fused optimizer takes grad_scale and found_inf from GradScaler: no host read,
    the unscale and the skip of an inf step are in the graph. Scales as on CPU."""
    ref = _mlp()
    lazy = copy.deepcopy(ref).to(dev)
    x, y = rand(16, 16), torch.arange(16) % 5
    kw = dict(init_scale=2.0 ** 12, growth_interval=2)
    runs = []
    for model, device, sync in ((ref, "cpu", None), (lazy, "lazyxla", lx.sync)):
        opt, scaler = FUSED[name](model.parameters()), torch.amp.GradScaler(device, **kw)
        xs, ys, losses, scales = x.to(device), y.to(device), [], []
        for i in range(7):
            if i == 5:
                lx.metrics.clear_all()
            losses += _train(model, opt, xs, ys, 1, torch.float16, scaler=scaler, sync=sync,
                             after_backward=_poison(0 if i == 3 else -1))
            scales.append(scaler.get_scale())
        runs.append((losses, scales, list(model.parameters())))
    (exp, cpu_scales, cpu_params), (got, lazy_scales, lazy_params) = runs
    assert lazy_scales == cpu_scales and cpu_scales[3] == cpu_scales[2] / 2
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp), **TOL[torch.float16])
    for pr, pl in zip(cpu_params, lazy_params):
        torch.testing.assert_close(pl.detach().cpu(), pr.detach(), rtol=5e-3, atol=5e-3)
    assert counter("UncachedCompile") == 0 and counter("CachedCompile") == 2     # steps 5 and 6
    assert lx.metrics.metric_data("ExecuteTime")[0] == 2
    assert host_fallbacks() == []


def test_wide_read_materialises_other_pending_work_and_never_fails_on_it(dev):
    """found_inf's host read is wide: other pending tensors of the device come along
    (installed, not donated); one that can never be computed (its input buffer was
    donated: simulated as in test_donation_safety) leaves the read narrow, not failed."""
    grads = [rand(4).to(dev)]
    found, inv = torch.zeros((), device=dev), torch.ones((), device=dev)
    other = rand(3).to(dev) * 3
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 0.0
    assert lx.debug.ir_text([other, grads[0]]) == "(nothing pending)"
    torch.testing.assert_close(other.cpu(), rand(3) * 3)
    x = rand(4).to(dev)
    dead = x * 2
    x._st.value.data.mark_donated("simulated")
    pending = rand(2).to(dev) + 1
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 0.0
    assert lx.debug.ir_text([pending]) != "(nothing pending)"   # the narrow retry left it
    torch.testing.assert_close(pending.cpu(), rand(2) + 1)
    with pytest.raises(lx.DonatedBufferError, match="simulated"):
        dead.cpu()   # still pending on the donated buffer, and it says so
