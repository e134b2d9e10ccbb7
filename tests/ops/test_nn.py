"""Normalization, convolution backward, pooling, losses and dropout against
eager CPU: functional ops (forward + backward) and the torch.nn modules that
use them (parameters' gradients and buffers after a step)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyxla as lx
from helpers import assert_close, assert_no_fallback, check_op
from helpers import randn_grad as _x

LOW = [(torch.float32, 1e-5, 1e-5), (torch.bfloat16, 3e-2, 3e-2), (torch.float16, 3e-3, 3e-3)]


def check_module(module, *inputs, steps=1, rtol=1e-5, atol=1e-5, input_grad=True):
    """Run `steps` forward/backward passes of a CPU module and of a lazyxla copy;
    compare outputs, input and parameter gradients and buffers (running stats)."""
    dev = lx.device()
    mod_d = copy.deepcopy(module).to(dev)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        xs = [i.detach().clone().requires_grad_(input_grad and i.is_floating_point()) for i in inputs]
        xd = [i.detach().to(dev).requires_grad_(input_grad and i.is_floating_point()) for i in inputs]
        out, out_d = module(*xs), mod_d(*xd)
        assert_close(out_d, out, rtol, atol)
        if out.requires_grad:
            w = torch.randn(out.shape, generator=gen, dtype=out.dtype)
            (out * w).sum().backward()
            (out_d * w.to(dev)).sum().backward()
            for a, b in zip(xd, xs):
                if b.requires_grad:
                    assert_close(a.grad, b.grad, max(rtol, 1e-4), max(atol, 1e-4))
        lx.sync()
    for (name, p), (_, pd) in zip(module.named_parameters(), mod_d.named_parameters()):
        if p.grad is not None:
            assert_close(pd.grad, p.grad, max(rtol, 1e-4), max(atol, 1e-4))
    for (name, b), (_, bd) in zip(module.named_buffers(), mod_d.named_buffers()):
        assert_close(bd, b, rtol, atol)
    return mod_d


# -- layer norm -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,rtol,atol", LOW)
def test_layer_norm(dtype, rtol, atol):
    x = _x(3, 4, 8, dtype=dtype)
    w, b = _x(8, dtype=dtype), _x(8, dtype=dtype)
    check_op(lambda x, w, b: F.layer_norm(x, (8,), w, b), x, w, b, rtol=rtol, atol=atol)
    check_op(lambda x: F.layer_norm(x, (4, 8), eps=1e-3), x, rtol=rtol, atol=atol)
    assert_no_fallback("native_layer_norm", "native_layer_norm_backward", "var_mean")


def test_layer_norm_partial_grads():
    x = torch.randn(5, 6)
    w, b = _x(6), torch.randn(6)                     # bias frozen, input needs no grad
    check_op(lambda x, w, b: F.layer_norm(x, (6,), w, b), x, w, b)
    check_op(lambda x, w: F.layer_norm(x, (6,), w), x.requires_grad_(), w.detach())


def test_nn_layer_norm_module():
    check_module(nn.LayerNorm(16), torch.randn(4, 7, 16), steps=2)
    check_module(nn.LayerNorm([7, 16], elementwise_affine=False), torch.randn(4, 7, 16))
    assert_no_fallback("native_layer_norm", "native_layer_norm_backward")


# -- batch norm -----------------------------------------------------------------------------

def test_batch_norm2d_train_updates_running_stats():
    bn = nn.BatchNorm2d(3)
    mod_d = check_module(bn, torch.randn(4, 3, 5, 5) * 2 + 1, steps=3, rtol=1e-5, atol=1e-5)
    assert int(mod_d.num_batches_tracked.cpu()) == 3
    # running_var uses the unbiased batch variance
    assert not torch.allclose(mod_d.running_var.cpu(), torch.ones(3))
    assert_no_fallback("native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit_functional",
                       "flatten")


def test_batch_norm2d_eval():
    bn = nn.BatchNorm2d(3)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    check_module(bn.eval(), torch.randn(4, 3, 5, 5), steps=2)
    assert_no_fallback("native_batch_norm", "native_batch_norm_backward")


@pytest.mark.parametrize("make", [
    lambda: nn.BatchNorm1d(6),
    lambda: nn.BatchNorm1d(6, affine=False),
    lambda: nn.BatchNorm1d(6, track_running_stats=False),
    lambda: nn.BatchNorm1d(6, momentum=None),        # cumulative moving average
])
def test_batch_norm1d_variants(make):
    check_module(make(), torch.randn(8, 6), steps=2)
    check_module(make(), torch.randn(4, 6, 5), steps=1)


@pytest.mark.parametrize("dtype,rtol,atol", LOW[1:])
def test_batch_norm_low_precision_input(dtype, rtol, atol):
    x = _x(4, 3, 6, dtype=dtype)
    w, b = _x(3), _x(3)

    def fn(x, w, b):
        rm, rv = torch.zeros(3, device=x.device), torch.ones(3, device=x.device)
        y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2)
        return y, rm, rv
    check_op(fn, x, w, b, rtol=rtol, atol=atol)


def test_batch_norm_frozen_affine():
    x = _x(4, 3, 6)
    check_op(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, torch.randn(3), _x(3))


# -- group norm -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,rtol,atol", LOW[:2])
def test_group_norm(dtype, rtol, atol):
    x = _x(2, 6, 4, 3, dtype=dtype)
    check_op(lambda x, w, b: F.group_norm(x, 3, w, b), x, _x(6, dtype=dtype), _x(6, dtype=dtype),
             rtol=rtol, atol=atol)
    check_op(lambda x: F.group_norm(x, 2, eps=1e-3), x, rtol=rtol, atol=atol)
    assert_no_fallback("native_group_norm", "native_group_norm_backward")


def test_nn_group_norm_module():
    check_module(nn.GroupNorm(2, 4), torch.randn(3, 4, 5, 5), steps=2)
    check_module(nn.GroupNorm(4, 4, affine=False), torch.randn(3, 4, 7))


# -- convolution backward ---------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=(0, 2), dilation=2),
    dict(groups=2, padding=1),
    dict(groups=4, stride=2, bias=False),
    dict(padding="same", dilation=(1, 2)),
])
def test_nn_conv2d(kw):
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3, **kw)
    check_module(conv, torch.randn(2, 4, 9, 10), rtol=1e-4, atol=1e-4)
    assert_no_fallback("convolution_backward", "convolution")


def test_conv_first_layer_input_needs_no_grad():
    conv = nn.Conv2d(3, 5, 3, padding=1)
    check_module(conv, torch.randn(2, 3, 6, 6), steps=2, rtol=1e-4, atol=1e-4, input_grad=False)
    conv_nb = nn.Conv2d(3, 5, 3, bias=False)
    conv_nb.weight.requires_grad_(False)
    check_module(conv_nb, torch.randn(2, 3, 6, 6), rtol=1e-4, atol=1e-4)   # only the input's gradient
    assert_no_fallback("convolution_backward")


def test_conv1d_and_transposed():
    check_module(nn.Conv1d(3, 6, 5, stride=2, padding=2, groups=3), torch.randn(2, 3, 17), rtol=1e-4, atol=1e-4)
    check_module(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                 torch.randn(2, 4, 5, 5), rtol=1e-4, atol=1e-4)
    assert_no_fallback("convolution_backward")


@pytest.mark.parametrize("dtype,rtol,atol", LOW[1:])
def test_conv2d_low_precision(dtype, rtol, atol):
    x, w, b = _x(2, 4, 8, 8, dtype=dtype), _x(6, 2, 3, 3, dtype=dtype), _x(6, dtype=dtype)
    check_op(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2), x, w, b, rtol=rtol, atol=atol * 3)


# -- pooling ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1), padding=(1, 1)),
    dict(kernel_size=2, stride=1, padding=1, ceil_mode=True),
])
def test_max_pool2d(kw):
    x = _x(2, 3, 9, 8)
    check_op(lambda t: F.max_pool2d(t, **kw, return_indices=True), x)
    ties = torch.randint(0, 3, (2, 2, 7, 7)).float().requires_grad_()   # indices of the first max
    check_op(lambda t: F.max_pool2d(t, **kw, return_indices=True), ties)
    check_op(lambda t: F.max_pool2d(t, **kw), x[0])                     # unbatched (C, H, W)
    assert_no_fallback("max_pool2d_with_indices", "max_pool2d_with_indices_backward")


def test_max_pool2d_neg_inf_and_module():
    x = torch.full((1, 1, 4, 4), float("-inf"))
    x[0, 0, 3, 3] = 1.0
    check_op(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), x)
    check_module(nn.MaxPool2d(2), torch.randn(2, 3, 8, 8))
    check_module(nn.MaxPool2d(3, 2, 1), torch.randn(2, 3, 7, 7))
    with torch.no_grad():
        check_op(lambda t: F.max_pool2d(t, 2), torch.randn(2, 3, 6, 6))


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 3), stride=(1, 2), divisor_override=4),
])
def test_avg_pool2d(kw):
    check_op(lambda t: F.avg_pool2d(t, **kw), _x(2, 3, 9, 8))
    check_op(lambda t: F.avg_pool2d(t, **kw), _x(3, 7, 7))
    assert_no_fallback("avg_pool2d", "avg_pool2d_backward")


def test_avg_pool2d_bfloat16_and_module():
    check_op(lambda t: F.avg_pool2d(t, 2), _x(2, 3, 8, 8, dtype=torch.bfloat16), rtol=2e-2, atol=2e-2)
    check_module(nn.AvgPool2d(3, stride=2, padding=1), torch.randn(2, 3, 9, 9))


@pytest.mark.parametrize("size", [1, 3, (2, 4), (5, 7), (4, None)])
def test_adaptive_avg_pool2d(size):
    check_op(lambda t: F.adaptive_avg_pool2d(t, size), _x(2, 3, 8, 7))
    check_module(nn.AdaptiveAvgPool2d(size), torch.randn(2, 3, 10, 9))
    assert_no_fallback("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "adaptive_avg_pool2d")


# -- losses -------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
    x = torch.randn(6, 5).log_softmax(1).detach().requires_grad_()
    t = torch.tensor([0, 4, 2, -100, 1, 4])
    check_op(lambda x, t: F.nll_loss(x, t, reduction=reduction), x, t)
    w = torch.rand(5)
    check_op(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x, t, w)
    check_op(lambda x, t, w: F.nll_loss(x, t, w, ignore_index=4, reduction=reduction), x, t.clamp(min=0), w)
    x2 = _x(2, 4, 3, 5)
    t2 = torch.randint(0, 4, (2, 3, 5))
    t2[0, 0, 0] = -100
    check_op(lambda x, t: F.nll_loss(x, t, reduction=reduction), x2, t2)
    check_op(lambda x, t: F.nll_loss(x, t, reduction=reduction), _x(5), torch.tensor(3))
    check_op(lambda x, t: F.nll_loss(x, t, reduction=reduction), _x(3, 4, 6), torch.randint(0, 4, (3, 6)))
    assert_no_fallback("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
                       "gather", "scatter")


@pytest.mark.parametrize("kw", [
    dict(), dict(label_smoothing=0.1), dict(ignore_index=2), dict(label_smoothing=0.2, ignore_index=-100),
    dict(reduction="sum", label_smoothing=0.05), dict(weight=True, label_smoothing=0.1),
])
def test_cross_entropy(kw):
    kw = dict(kw)
    x = _x(8, 5)
    t = torch.tensor([0, 4, 2, -100, 1, 4, 2, 3])
    if kw.get("ignore_index", -100) != -100:
        t = t.clamp(min=0)
    if kw.pop("weight", False):
        check_op(lambda x, t, w: F.cross_entropy(x, t, w, **kw), x, t, torch.rand(5))
    else:
        check_op(lambda x, t: F.cross_entropy(x, t, **kw), x, t)
    assert_no_fallback("nll_loss_forward", "nll_loss_backward", "gather", "scatter", "index")


def test_cross_entropy_soft_targets_and_bf16():
    check_op(lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1), _x(4, 6), torch.rand(4, 6).softmax(1))
    check_op(lambda x, t: F.cross_entropy(x, t), _x(4, 6, dtype=torch.bfloat16), torch.randint(0, 6, (4,)),
             rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    x, t = _x(4, 5), _x(4, 5)
    check_op(lambda x, t: F.mse_loss(x, t, reduction=reduction), x, t)
    check_op(lambda x, t: F.l1_loss(x, t, reduction=reduction), x, t)
    check_op(lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=0.5), x, t)
    check_op(lambda x, t: F.huber_loss(x, t, reduction=reduction, delta=0.7), x, t)
    assert_no_fallback("mse_loss", "mse_loss_backward", "smooth_l1_loss", "huber_loss")


def test_mse_loss_low_precision():
    check_op(lambda x, t: F.mse_loss(x, t), _x(8, 3, dtype=torch.bfloat16), _x(8, 3, dtype=torch.bfloat16),
             rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    p = torch.rand(4, 5).clamp(0.05, 0.95).requires_grad_()
    t = torch.rand(4, 5)
    check_op(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), p, t)
    check_op(lambda p, t, w: F.binary_cross_entropy(p, t, w, reduction=reduction), p, t, torch.rand(5))
    z = _x(4, 5)
    check_op(lambda z, t: F.binary_cross_entropy_with_logits(z, t, reduction=reduction), z, t)
    check_op(lambda z, t, w, pw: F.binary_cross_entropy_with_logits(z, t, w, pos_weight=pw, reduction=reduction),
             z, t, torch.rand(4, 1), torch.rand(5) * 3)
    assert_no_fallback("binary_cross_entropy", "binary_cross_entropy_backward", "binary_cross_entropy_with_logits",
                       "log_sigmoid_forward")


def test_binary_cross_entropy_saturated():
    check_op(lambda p, t: F.binary_cross_entropy(p, t), torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 1.0]))


# -- dropout ---------------------------------------------------------------------------------

def test_dropout_statistics_and_scaling(dev):
    p = 0.3
    torch.manual_seed(0)
    x = torch.ones(400, 500, device=dev, requires_grad=True)
    y = F.dropout(x, p)
    y.sum().backward()
    keep = (y != 0).float()
    assert abs(keep.mean().item() - (1 - p)) < 0.01
    kept = y[y != 0]
    torch.testing.assert_close(kept.cpu(), torch.full_like(kept.cpu(), 1 / (1 - p)))
    torch.testing.assert_close(x.grad.cpu(), y.detach().cpu())          # grad = mask * scale
    assert_no_fallback("native_dropout", "rand_like", "bernoulli", "native_dropout_backward")


def test_dropout_reproducible_with_manual_seed(dev):
    x = torch.randn(64, 64, device=dev)
    torch.manual_seed(123)
    a = F.dropout(x, 0.5).cpu()
    b = F.dropout(x, 0.5).cpu()
    torch.manual_seed(123)
    a2 = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, a2)
    assert not torch.equal(a, b)


def test_dropout_modes(dev):
    x = torch.randn(10, 10)
    check_op(lambda t: F.dropout(t, 0.0), x)
    check_op(lambda t: F.dropout(t, 0.7, training=False), x)
    check_op(lambda t: F.dropout(t, 1.0), x)
    drop = nn.Dropout(0.5).to(dev).eval()
    assert torch.equal(drop(x.to(dev)).cpu(), x)


def test_rand_like_stays_on_device(dev):
    x = torch.empty(200, 300, device=dev)
    torch.manual_seed(1)
    u = torch.rand_like(x)
    n = torch.randn_like(x, dtype=torch.float64)
    assert n.dtype == torch.float64
    assert 0.45 < u.mean().item() < 0.55 and 0.95 < n.std().item() < 1.05
    assert_no_fallback("rand_like", "randn_like")


# -- a whole training step stays on the device -------------------------------------------

def test_convnet_training_step_has_no_host_fallback(dev):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.GroupNorm(2, 8), nn.ReLU(), nn.AvgPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(8, 5), nn.LayerNorm(5))
    cpu_model = copy.deepcopy(model).eval()
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(4, 3, 16, 16)
    t = torch.tensor([0, 1, 4, 2])
    for _ in range(2):
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(dev)), t.to(dev), label_smoothing=0.1)
        loss.backward()
        opt.step()
        lx.sync()
    assert loss.item() == loss.item()
    fallbacks = [n for n in lx.metrics.counter_names() if n.startswith("aten::") or n.startswith("prims::")]
    assert fallbacks == [], fallbacks
    # eval mode uses the running statistics the two steps produced
    model.eval()
    cpu_model.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    assert_close(model(x.to(dev)), cpu_model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [3, (2, 5), 1, (4, 4)])
def test_adaptive_max_pool2d(size):
    check_op(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), _x(2, 3, 8, 7))
    ties = torch.randint(0, 3, (2, 2, 9, 6)).float().requires_grad_()
    check_op(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), ties)
    check_op(lambda t: F.adaptive_max_pool2d(t, size), _x(3, 10, 9))
    assert_no_fallback("adaptive_max_pool2d", "adaptive_max_pool2d_backward")


@torch.library.custom_op("lazyxla_test::halve", mutates_args=())
def _halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


@_halve.register_fake
def _(x):
    return torch.empty_like(x)


def test_decomposition_returning_not_implemented_runs_on_host(monkeypatch):
    # Some PyTorch decompositions decline some arguments (adaptive_max_pool2d/3d with
    # non-divisible sizes did, before both were lowered): here one that declines odd sizes.
    from torch._decomp import decomposition_table
    op = torch.ops.lazyxla_test.halve.default
    monkeypatch.setitem(decomposition_table, op, lambda x: NotImplemented if x.shape[-1] % 2 else x * 0.5)
    check_op(torch.ops.lazyxla_test.halve, torch.randn(3, 4))
    assert lx.metrics.counter_value("lazyxla_test::halve") is None   # decomposed
    check_op(torch.ops.lazyxla_test.halve, torch.randn(3, 5))
    assert lx.metrics.counter_value("lazyxla_test::halve") == 1      # declined: ran on the host
