"""model.to(dev) keeps Parameter objects, weight ties and everything built on them.

Before, `Module._apply` made a new Parameter per module for a lazy tensor, so a
model whose output layer shares the embedding matrix trained two untied copies
(losses drifted from eager within five AdamW steps) and an optimizer built before
`.to()` updated nothing."""
from __future__ import annotations

import copy
import io

import torch

import lazyxla as lx
from helpers import assert_close, float32_math_tolerance


class TiedLM(torch.nn.Module):
    """Embedding shared with the output projection, as GPT-2/T5 do."""

    def __init__(self, vocab: int = 17, width: int = 8) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.mix = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.tanh(self.mix(self.emb(ids))))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.roll(1, -1).flatten())


def _model() -> TiedLM:
    torch.manual_seed(0)
    return TiedLM()


def _ids() -> torch.Tensor:
    return torch.randint(0, 17, (4, 6), generator=torch.Generator().manual_seed(1))


def test_to_device_keeps_parameter_objects_and_ties(dev):
    model = _model()
    params = list(model.parameters())
    weight = model.emb.weight
    model.to(dev)
    assert model.head.weight is model.emb.weight is weight
    assert list(model.parameters()) == params and len(params) == 3
    assert all(isinstance(p, torch.nn.Parameter) and p.device == dev and p.requires_grad for p in params)


def test_tied_model_trains_like_eager_with_an_optimizer_made_before_to(dev):
    eager = _model()
    lazy = copy.deepcopy(eager)
    ids = _ids()
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=0.05)
    lazy_opt = torch.optim.AdamW(lazy.parameters(), lr=0.05)   # before .to(): must still train it
    lazy.to(dev)
    lazy_ids = ids.to(dev)
    for step in range(5):
        for model, opt, x in ((eager, eager_opt, ids), (lazy, lazy_opt, lazy_ids)):
            opt.zero_grad()
            loss = model(x)
            loss.backward()
            opt.step()
            if model is lazy:
                lx.sync()
                lazy_loss = loss.item()
            else:
                eager_loss = loss.item()
        tol = float32_math_tolerance(1e-5, 1e-6)   # AdamW's sqrt and division on a TPU
        assert abs(lazy_loss - eager_loss) <= tol["rtol"] * abs(eager_loss) + tol["atol"], (step, lazy_loss, eager_loss)
    for l, e in zip(lazy.parameters(), eager.parameters()):
        assert_close(l.detach(), e.detach(), rtol=1e-5, atol=1e-6)
    assert lazy.head.weight is lazy.emb.weight


def test_grad_moves_with_its_parameter(dev):
    model = _model()
    model(_ids()).backward()
    grad = model.emb.weight.grad.clone()
    model.to(dev)
    assert model.emb.weight.grad.device == dev
    torch.testing.assert_close(model.head.weight.grad.cpu(), grad)


def test_state_dict_round_trips_and_keeps_ties(dev):
    cpu = _model()
    lazy = _model().to(dev)
    with torch.no_grad():
        for p in lazy.parameters():
            p.mul_(2)
    lx.sync()
    state = lazy.state_dict()
    assert state["emb.weight"].device == dev and state["emb.weight"] is not None
    cpu.load_state_dict(state)           # lazy -> CPU module
    assert cpu.head.weight is cpu.emb.weight
    back = _model().to(dev)
    back.load_state_dict(cpu.state_dict())   # CPU -> lazy module, copied in place
    assert back.head.weight is back.emb.weight
    for (name, c), b in zip(cpu.state_dict().items(), back.state_dict().values()):
        torch.testing.assert_close(b.cpu(), c, msg=name)
        torch.testing.assert_close(c, state[name].cpu(), msg=name)


def test_deepcopy_and_torch_save_of_a_lazy_model(dev):
    lazy = _model().to(dev)
    twin = copy.deepcopy(lazy)
    assert twin.head.weight is twin.emb.weight and twin.emb.weight is not lazy.emb.weight
    assert twin.emb.weight.device == dev
    torch.testing.assert_close(twin.emb.weight.cpu(), lazy.emb.weight.cpu())
    with torch.no_grad():
        twin.emb.weight.add_(1)      # the copy has buffers of its own
    torch.testing.assert_close(twin.emb.weight.cpu(), lazy.emb.weight.cpu() + 1)
    buf = io.BytesIO()
    torch.save(lazy.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["emb.weight"].device == torch.device("cpu")
    torch.testing.assert_close(loaded["head.weight"], _model().head.weight.detach())
    assert not lx.is_donated(lazy.emb.weight)


def test_moving_a_moved_model_again_is_a_no_op(dev):
    model = _model().to(dev)
    weight = model.emb.weight
    model.to(dev)
    assert model.emb.weight is weight is model.head.weight
    lx.sync()
    assert lx.metrics.counter_value("UncachedCompile") is None
