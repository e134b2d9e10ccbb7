"""Activation checkpointing (lazyxla/recompute.py): torch.utils.checkpoint.checkpoint in both
modes and lx.utils.checkpoint give eager's values and gradients, and cut the step's
temporaries, since the backward's re-run is not merged back into the forward."""
import copy

import pytest
import torch
import torch.utils.checkpoint as tuc

import lazyxla as lx
from lazyxla import patches, recompute

MODES = [pytest.param(True, id="reentrant"), pytest.param(False, id="non_reentrant")]


def _blocks(n: int, d: int) -> torch.nn.ModuleList:
    torch.manual_seed(0)
    return torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        for _ in range(n))


def _forward(blocks, x, reentrant=None, ckpt=tuc.checkpoint):
    h = x
    for b in blocks:
        h = h + (b(h) if reentrant is None else ckpt(b, h, use_reentrant=reentrant))
    return h.pow(2).mean()


def test_torch_checkpoint_is_patched_and_cpu_calls_are_unchanged():
    assert tuc.checkpoint is recompute.checkpoint
    patch = patches.get("torch_checkpoint")
    try:
        patch.undo()
        assert tuc.checkpoint is recompute._ORIGINAL
    finally:
        recompute.patch_torch_checkpoint()
    assert tuc.checkpoint is recompute.checkpoint
    blocks = _blocks(1, 4)
    x = torch.randn(3, 4, requires_grad=True)
    loss = _forward(blocks, x, reentrant=False)
    loss.backward()
    ref = x.detach().clone().requires_grad_()
    _forward(blocks, ref).backward()
    torch.testing.assert_close(x.grad, ref.grad)


@pytest.mark.parametrize("reentrant", MODES)
def test_values_and_grads_equal_eager(dev, reentrant):
    cpu = _blocks(3, 16)
    lazy = copy.deepcopy(cpu).to(dev)
    x = torch.randn(5, 16)
    xc = x.clone().requires_grad_()
    xl = x.to(dev).requires_grad_()
    ref = _forward(cpu, xc)
    ref.backward()
    out = _forward(lazy, xl, reentrant)
    out.backward()
    torch.testing.assert_close(out.cpu(), ref.detach())
    torch.testing.assert_close(xl.grad.cpu(), xc.grad)
    for p, q in zip(lazy.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)


@pytest.mark.parametrize("reentrant", MODES)
def test_optimizer_three_steps_match_eager(dev, reentrant):
    cpu = _blocks(2, 16)
    lazy = copy.deepcopy(cpu).to(dev)
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_l = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    x = torch.randn(6, 16)
    # the reentrant form gives parameter gradients only if an input requires grad
    xc, xl = x.clone().requires_grad_(reentrant), x.to(dev).requires_grad_(reentrant)
    for _ in range(3):
        losses = []
        for model, opt, inp, rr in ((cpu, opt_c, xc, None), (lazy, opt_l, xl, reentrant)):
            opt.zero_grad()
            loss = _forward(model, inp, rr)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        lx.sync()
        torch.testing.assert_close(losses[1].cpu(), losses[0])
    for p, q in zip(lazy.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def test_explicit_form_kwargs_tuple_outputs_and_non_tensor_args(dev):
    torch.manual_seed(0)
    w = torch.randn(4, 4)

    def region(a, scale, *, b):
        return a @ w.to(a.device) * scale, (a + b).relu()

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    y1, y2 = region(ac, 2.0, b=bc)
    (y1.sum() + y2.pow(2).sum()).backward()
    al, bl = a.to(dev).requires_grad_(), b.to(dev).requires_grad_()
    z1, z2 = lx.utils.checkpoint(region, al, 2.0, b=bl, use_reentrant=False)
    (z1.sum() + z2.pow(2).sum()).backward()
    torch.testing.assert_close(z1.cpu(), y1.detach())
    torch.testing.assert_close(al.grad.cpu(), ac.grad)
    torch.testing.assert_close(bl.grad.cpu(), bc.grad)
    z1.add_(1)   # outputs are ordinary tensors: in-place use is legal
    with pytest.raises(ValueError, match="Unexpected keyword arguments"):
        lx.utils.checkpoint(region, al, 2.0, b=bl)   # reentrant (the default) takes no kwargs


@pytest.mark.parametrize("reentrant", MODES)
def test_dropout_rerun_draws_the_same_mask(dev, reentrant):
    torch.manual_seed(0)
    blk = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 8)).to(dev)
    x = torch.randn(4, 8).to(dev).requires_grad_()
    results = []
    for ckpt in (False, True):
        torch.manual_seed(1)
        blk.zero_grad()
        x.grad = None
        y = tuc.checkpoint(blk, x, use_reentrant=reentrant) if ckpt else blk(x)
        y.sum().backward()
        results.append([t.cpu() for t in (y, x.grad, blk[0].weight.grad)])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


def _step_temporaries(dev, reentrant) -> int:
    blocks = _blocks(6, 256).to(dev)
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    x = torch.randn(512, 256).to(dev).requires_grad_(reentrant is True)
    for _ in range(2):
        opt.zero_grad()
        _forward(blocks, x, reentrant).backward()
        opt.step()
        lx.sync()
    return lx.debug.donation_report().memory["temp_size_in_bytes"]


@pytest.mark.parametrize("reentrant", MODES)
def test_six_blocks_step_temporaries_shrink(dev, reentrant):
    plain = _step_temporaries(dev, None)
    checkpointed = _step_temporaries(dev, reentrant)
    assert checkpointed <= 0.7 * plain, (checkpointed, plain)
