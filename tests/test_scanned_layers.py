"""lx.experimental.ScannedLayers (issue #22): identical layers held as stacked
parameters, run as one scan. Checked against the plain `nn.ModuleList` loop in
eager PyTorch (values, gradients, AdamW over 3 steps), checkpoints interchangeable
with the ModuleList's, counters (the whole step traces the same ops at every
depth, no steady-state compiles, the stacked tensors donated) and bad input."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import lazyxla as lx
from lazyxla import metrics
from lazyxla.experimental import ScanError, ScannedLayers
from helpers import assert_close


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 16)
        self.register_buffer("scale", torch.rand(16) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x))) * self.scale


def blocks(n: int) -> nn.ModuleList:
    torch.manual_seed(0)
    return nn.ModuleList(Block() for _ in range(n))


def loop(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x)
    return x


def test_stacked_layout_and_eager_forward():
    ref = blocks(3)
    stacked = ScannedLayers(ref)
    assert len(stacked) == 3
    names = {n: tuple(p.shape) for n, p in stacked.named_parameters()}
    assert names == {"stacked.norm.weight": (3, 16), "stacked.norm.bias": (3, 16),
                     "stacked.fc.weight": (3, 16, 16), "stacked.fc.bias": (3, 16)}
    assert tuple(stacked.stacked.scale.shape) == (3, 16)
    x = torch.randn(2, 16)
    assert_close(stacked(x), loop(ref, x))   # on CPU the module is the plain loop over slices


@pytest.mark.parametrize("pure,remat", [(False, True), (True, True), (True, False)])
def test_trains_like_the_module_list(dev, pure, remat):
    ref = blocks(4)
    lazy = ScannedLayers(copy.deepcopy(ref), is_layer_pure=pure, rematerialize=remat).to(dev)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    x = torch.randn(3, 16)
    compiles = []
    for _ in range(3):
        loss = (loop(ref, x) ** 2).mean()
        opt_ref.zero_grad()
        loss.backward()
        opt_ref.step()

        metrics.clear_all()
        lazy_loss = (lazy(x.to(dev)) ** 2).mean()
        opt.zero_grad()
        lazy_loss.backward()
        for name, p in lazy.stacked.named_parameters():
            expected = torch.stack([layer.get_parameter(name).grad for layer in ref])
            assert_close(p.grad, expected, rtol=1e-4, atol=1e-6)
        opt.step()
        lx.sync()
        assert_close(lazy_loss, loss.detach(), rtol=1e-5)
        compiles.append(metrics.counter_value("UncachedCompile") or 0)
    state, ref_state = lazy.state_dict(), ref.state_dict()
    assert state.keys() == ref_state.keys()
    for key, value in ref_state.items():
        assert_close(state[key], value, rtol=1e-4, atol=1e-6)
    assert compiles[1:] == [0, 0], compiles


def step_counters(dev, n: int) -> tuple[int, int]:
    """(traced ops, donated buffers) of a steady-state training step with n layers."""
    lazy = ScannedLayers(blocks(n), is_layer_pure=True).to(dev)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    x = torch.randn(3, 16).to(dev)
    for _ in range(3):
        metrics.clear_all()
        loss = (lazy(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        traced = metrics.counter_value("TracedOps")
        lx.sync()
    return traced, lx.debug.donation_report().donors


def test_the_whole_step_does_not_grow_with_depth(dev):
    traced2, donated2 = step_counters(dev, 2)
    traced12, donated12 = step_counters(dev, 12)
    assert traced2 == traced12   # forward, backward and AdamW: one tensor per name at any depth
    # each stacked parameter and its two AdamW moments (4 names x 3) at any depth
    assert donated2 == donated12 == 12


def test_checkpoints_move_between_module_list_and_stacked(dev):
    ref = blocks(3)
    lazy = ScannedLayers(blocks(3)).to(dev)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(1.0)   # differs from the stacked module's values
    lazy.load_state_dict(ref.state_dict())
    x = torch.randn(2, 16)
    assert_close(lazy(x.to(dev)), loop(ref, x))
    back = blocks(3)
    back.load_state_dict(lazy.state_dict())
    for p, q in zip(back.parameters(), ref.parameters()):
        assert_close(p, q.detach())

    partial = {k: v for k, v in ref.state_dict().items() if not k.startswith("2.fc.")}
    with pytest.raises(RuntimeError, match=r"'fc.weight' for some layers only"):
        lazy.load_state_dict(partial)


def test_bad_input(dev):
    with pytest.raises(ScanError, match="at least one layer"):
        ScannedLayers([])
    layers = list(blocks(2)) + [nn.Linear(16, 16)]
    with pytest.raises(ScanError, match="ScannedLayers: mismatched keys"):
        ScannedLayers(layers)
    tied = blocks(2)
    tied[1].fc.weight = tied[0].fc.weight
    with pytest.raises(ScanError, match="layer 1's 'fc.weight' is the same tensor as layer 0's"):
        ScannedLayers(tied)
    with pytest.raises(ScanError, match="give the first layer's input"):
        ScannedLayers(blocks(2)).to(dev)()
