"""The reference workloads train like eager CPU (issue #2), with one graph and no
compiles per steady-state step, and donate every parameter and optimizer state."""
import copy

import pytest
import torch

import lazyxla as lx
from lazyxla import metrics, workloads

STEPS = 10
# parameters + optimizer state donated by the steady step graph (as PyTorch/XLA does)
EXPECTED_DONORS = {"mlp": 12, "gpt": 159, "convnet": 26}  # convnet: 10 params + 10 momentum
# buffers + 2x(running_mean, running_var, num_batches_tracked) of BatchNorm


def _run(name: str):
    wl = workloads.make(name)
    ref = wl.model
    lazy = copy.deepcopy(ref).to(lx.device())
    opt_ref = wl.optimizer(ref.parameters())
    opt_lazy = wl.optimizer(lazy.parameters())
    x, y = wl.inputs.to(lx.device()), wl.targets.to(lx.device())
    exp, got, per_step = [], [], []
    for step in range(STEPS):
        opt_ref.zero_grad()
        loss = wl.loss(ref, wl.inputs, wl.targets)
        loss.backward()
        opt_ref.step()
        exp.append(loss.item())

        metrics.clear_all()
        opt_lazy.zero_grad()
        loss = wl.loss(lazy, x, y)
        loss.backward()
        opt_lazy.step()
        lx.sync()
        per_step.append({
            "graphs": metrics.counter_value("ExecuteComputation") or 0,
            "compiles": metrics.counter_value("UncachedCompile") or 0,
            "fallbacks": [n for n in metrics.counter_names() if "::" in n],
            "donors": lx.debug.donation_report().donors,
        })
        got.append(loss.item())
    return ref, lazy, exp, got, per_step


@pytest.mark.parametrize("name", [
    "mlp",
    "convnet",
    pytest.param("gpt", marks=pytest.mark.slow),
])
def test_workload_trains_like_eager(name):
    ref, lazy, exp, got, per_step = _run(name)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(exp), rtol=1e-3, atol=1e-5)
    for (n, pr), pl in zip(ref.named_parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pr.detach(), rtol=1e-3, atol=1e-4, msg=n)
    for b_ref, b_lazy in zip(ref.buffers(), lazy.buffers()):
        torch.testing.assert_close(b_lazy.cpu(), b_ref, rtol=1e-3, atol=1e-4)
    for step, s in enumerate(per_step[3:], start=3):
        assert s["graphs"] == 1, f"step {step}: {s}"
        assert s["compiles"] == 0, f"step {step}: {s}"
        assert s["fallbacks"] == [], f"step {step}: ops ran on the host: {s['fallbacks']}"
        assert s["donors"] == EXPECTED_DONORS[name], f"step {step}: {s}"
