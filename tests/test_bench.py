"""The benchmark suite (lazyxla/bench): the JAX limit computes what torch
computes, the report and chart render, and the quick mode runs end to end in
subprocesses with sane, complete records."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lazyxla.bench import plan, report
from lazyxla.bench.torch_backend import load_workloads, make_workload

jax = pytest.importorskip("jax")
jnp = jax.numpy
from lazyxla.bench import jax_models  # noqa: E402


def _params(model):
    return {k: jnp.asarray(v.detach().numpy()) for k, v in model.state_dict().items()}


# -- the JAX limit against torch -----------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_jax_logits_and_loss_match_torch(name):
    wl = make_workload(load_workloads(), name, plan.QUICK)
    params = _params(wl.model)
    logits = jax_models.LOGITS[name](params, jnp.asarray(wl.inputs.numpy()))
    expected = wl.model(wl.inputs).detach().numpy()
    np.testing.assert_allclose(np.asarray(logits), expected, rtol=1e-4, atol=1e-4)
    loss = jax_models.loss_fn(name)(params, jnp.asarray(wl.inputs.numpy()), jnp.asarray(wl.targets.numpy()))
    assert abs(float(loss) - wl.loss(wl.model, wl.inputs, wl.targets).item()) < 1e-5


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_jax_optimizer_matches_torch_optim(name):
    """Three updates with fixed gradients: torch.optim (SGD momentum / AdamW) and
    the hand-written JAX optimizers give the same parameters."""
    gen = torch.Generator().manual_seed(0)
    p_torch = {"a": torch.randn(4, 3, generator=gen), "b": torch.randn(5, generator=gen)}
    grads = [{k: torch.randn(v.shape, generator=gen) for k, v in p_torch.items()} for _ in range(3)]
    tensors = {k: v.clone().requires_grad_() for k, v in p_torch.items()}
    wl = load_workloads().Workload(name, torch.nn.Linear(1, 1), torch.zeros(1), torch.zeros(1))
    opt = wl.optimizer(list(tensors.values()))
    init, update = jax_models.OPTIMIZERS[name]
    params = {k: jnp.asarray(v.numpy()) for k, v in p_torch.items()}
    state = init(params)
    for g in grads:
        for k, t in tensors.items():
            t.grad = g[k].clone()
        opt.step()
        params, state = update(params, {k: jnp.asarray(v.numpy()) for k, v in g.items()}, state)
    for k, t in tensors.items():
        np.testing.assert_allclose(np.asarray(params[k]), t.detach().numpy(), rtol=1e-5, atol=1e-6)


# -- cells, report, chart ------------------------------------------------------------------

def test_cells_filter_and_variants():
    cs = plan.cells(("donate", "mlp"), ("lazyxla", "eager"))
    assert [c.label for c in cs] == ["mlp/lazyxla", "mlp/eager", "donate[alias-on]/lazyxla",
                                     "donate[alias-off]/lazyxla", "donate[alias-on]/eager"]
    assert not cs[3].aliasing and cs[2].aliasing


def test_gpt2_124m_runs_only_when_named_and_without_a_jax_limit():
    from lazyxla.bench.__main__ import parse_args
    assert "gpt2-124m" not in parse_args([]).workloads and "gpt2-124m" in plan.WORKLOADS
    cs = plan.cells(parse_args(["--workloads", "gpt2-124m"]).workloads, plan.SYSTEMS)
    assert [c.label for c in cs] == ["gpt2-124m/lazyxla", "gpt2-124m/lazyxla_compiled", "gpt2-124m/eager",
                                     "gpt2-124m/torch_xla"]


def test_quick_gpt2_124m_trains_like_eager(tmp_path):
    """Quick mode trains the tiny GPT-2 of hf_models.py in W6's loop (the real size is timed
    only in full runs): eager's losses, one graph and no compile per steady step."""
    _, recs = _run(tmp_path, "--workloads", "gpt2-124m", "--systems", "lazyxla,eager")
    lazy, eager = recs[("gpt2-124m", "", "lazyxla")], recs[("gpt2-124m", "", "eager")]
    assert lazy["ok"] and eager["ok"], (lazy.get("error"), eager.get("error"))
    assert len(lazy["losses"]) == len(eager["losses"]) == 3   # hf_warmup + hf_steps in quick mode
    torch.testing.assert_close(torch.tensor(lazy["losses"]), torch.tensor(eager["losses"]), rtol=1e-4, atol=1e-5)
    assert lazy["compiles_per_step"] == 0 and lazy["graphs_per_step"] == 1 and lazy["donors_per_graph"] > 0


def test_cells_accum_runs_lazyxla_with_and_without_the_api():
    cs = plan.cells(("accum",), ("lazyxla", "eager", "jax"), amp="bf16")
    assert [c.label for c in cs] == ["accum[api]/lazyxla", "accum[python-loop]/lazyxla", "accum/eager",
                                     "accum/jax"]


def test_jax_accum_step_equals_one_full_batch_step():
    """W5's JAX limit (lax.scan over micro-batches, then one AdamW update) trains exactly
    like W2's step on the whole batch: equal-sized micro-batches, mean of means."""
    settings = plan.QUICK
    wl = make_workload(load_workloads(), "accum", settings)
    params = _params(wl.model)
    x, y = jnp.asarray(wl.inputs.numpy()), jnp.asarray(wl.targets.numpy())
    init, _ = jax_models.OPTIMIZERS["accum"]
    micro = lambda t: t.reshape(settings.accum_micro, -1, *t.shape[1:])  # noqa: E731
    heads = wl.model.cfg.heads
    p_acc, _, loss_acc = jax_models.train_step_fn("accum", heads=heads)(params, init(params), micro(x), micro(y))
    p_full, _, loss_full = jax_models.train_step_fn("gpt", heads=heads)(params, init(params), x, y)
    assert abs(float(loss_acc) - float(loss_full)) < 1e-5
    for k in params:   # AdamW moves each weight by ~lr = 3e-4; near-zero gradients round apart
        np.testing.assert_allclose(np.asarray(p_acc[k]), np.asarray(p_full[k]), rtol=1e-5, atol=1e-5)
        assert not np.allclose(np.asarray(p_acc[k]), np.asarray(params[k]), rtol=0, atol=1e-5), k


def test_cells_amp_adds_autocast_rows_for_torch_training_only():
    cs = plan.cells(("mlp", "donate"), ("lazyxla", "eager", "jax"), amp="bf16")
    assert [c.label for c in cs] == ["mlp/lazyxla", "mlp/eager", "mlp/jax", "mlp[amp-bf16]/lazyxla",
                                     "mlp[amp-bf16]/eager", "donate[alias-on]/lazyxla",
                                     "donate[alias-off]/lazyxla", "donate[alias-on]/eager", "donate[alias-on]/jax",
                                     "donate[alias-off]/jax"]
    assert cs[3].amp == "bf16" and cs[0].amp is None and cs[3].aliasing
    with pytest.raises(ValueError, match="unknown amp dtype 'fp8'"):
        plan.cells(amp="fp8")


def test_report_amp_rows_compare_losses_with_eager_under_autocast():
    recs = [_fake("mlp", "lazyxla", 110.0, losses=[2.0, 1.9]), _fake("mlp", "jax", 100.0, losses=[2.0, 1.9]),
            _fake("mlp", "lazyxla", 90.0, "amp-bf16", losses=[2.01, 1.9]),
            _fake("mlp", "eager", 120.0, "amp-bf16", losses=[2.0, 1.9]),
            _fake("gpt", "lazyxla", 90.0, "amp-bf16", losses=[2.1]), _fake("gpt", "eager", 90.0, "amp-bf16",
                                                                           losses=[2.0])]
    text = report.render(recs, {"mode": "quick"})
    assert "| mlp[amp-bf16] | lazyxla | 90.0 | 90.0 | 0.90x |" in text   # timed against the fp32 limit
    assert "| mlp[amp-bf16] | lazyxla | 2.01000 |" in text and "| eager |" in text
    problems = report.checks(recs)
    assert problems == ["gpt[amp-bf16]/lazyxla: step-0 loss differs from eager by 5.0e-02 (relative)"]


def _fake(workload, system, step, variant="", **kw):
    rec = {"workload": workload, "system": system, "variant": variant, "ok": True,
           "step_ms": {"median": step, "min": step}, "peak_rss_mb": 100.0}
    rec.update(kw)
    return rec


def test_report_ratios_loss_check_and_failures(tmp_path):
    recs = [_fake("mlp", "lazyxla", 110.0, losses=[2.0, 1.9], compiles_per_step=0.0),
            _fake("mlp", "jax", 100.0, losses=[2.0005, 1.9]),
            _fake("gpt", "lazyxla", 10.0, losses=[9.0]), _fake("gpt", "jax", 10.0, losses=[8.0]),
            {"workload": "gpt", "system": "eager", "variant": "", "ok": False, "error": "RuntimeError: boom"},
            _fake("donate", "lazyxla", 5.0, "alias-on", tensor_mb=64, peak_delta_mb=3.0),
            _fake("donate", "jax", 5.0, "alias-on", tensor_mb=64, peak_delta_mb=3.0),
            _fake("trace", "lazyxla", 2.0, ops=200, trace_us_per_op={"median": 10.0}, sync_ms={"median": 1.0})]
    text = report.render(recs, {"mode": "quick"})
    assert "| mlp | lazyxla | 110.0 | 110.0 | 1.10x |" in text
    assert "MISMATCH" in text and "RuntimeError: boom" in text
    problems = report.checks(recs)
    assert any("gpt/lazyxla" in p and "step-0 loss" in p for p in problems)
    assert any("gpt/eager failed" in p for p in problems)
    assert not any("mlp/" in p for p in problems)   # 2.5e-4 relative is within 1e-3
    from lazyxla.bench.chart import save_chart
    path = save_chart(recs, str(tmp_path / "c.png"))
    assert path and os.path.getsize(path) > 1000


# -- end to end ----------------------------------------------------------------------------

def _run(tmp_path, *args, timeout=600):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "lazyxla.bench", "--quick", "--no-progress", "--out", str(out),
                           *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert (out / "results.md").read_text().startswith("# lazyxla benchmark (quick mode)")
    return out, {(r["workload"], r["variant"], r["system"]): r for r in records}


def test_quick_donate_lazyxla_and_failing_cell_recorded(tmp_path):
    """W3 on lazyxla: aliasing keeps the peak near 1x the tensor; a system that
    cannot start (a bogus PyTorch/XLA interpreter) is recorded, not fatal."""
    out, recs = _run(tmp_path, "--workloads", "donate", "--systems", "lazyxla,torch_xla",
                     "--torch-xla-python", "/bin/false")
    on, off = recs[("donate", "alias-on", "lazyxla")], recs[("donate", "alias-off", "lazyxla")]
    for r in (on, off):
        assert r["ok"], r.get("error")
        assert r["value_ok"] and r["tensor_mb"] == 64
        assert r["step_ms"]["median"] > 0 and r["first_step_s"] > 0
        assert r["compiles_per_step"] == 0
    assert on["donors_per_graph"] == 1 and off["donors_per_graph"] == 0
    assert on["memory"]["alias_size_in_bytes"] == 64 * 2**20
    assert on["peak_delta_mb"] < 0.25 * off["peak_delta_mb"]
    assert off["peak_delta_mb"] > 0.75 * 64
    failed = recs[("donate", "alias-on", "torch_xla")]
    assert not failed["ok"] and "without a result" in failed["error"]
    assert (out / "bench.png").exists()


TRAIN_FIELDS = ("step_ms", "trace_ms", "first_step_s", "compiles_per_step", "graphs_per_step", "donors_per_graph",
                "traced_ops_per_step", "peak_rss_mb", "losses", "memory", "minor_faults_per_step")


@pytest.mark.slow
def test_quick_all_workloads(tmp_path):
    out, recs = _run(tmp_path, "--systems", "lazyxla,eager,jax")
    assert len(recs) == 3 * 3 + 5 + 4
    for key, r in recs.items():
        assert r["ok"], (key, r.get("error"))
        assert r["step_ms"]["median"] > 0 and r["step_ms"]["min"] <= r["step_ms"]["median"]
        assert r["peak_rss_mb"] > 0
    for w in ("mlp", "gpt"):
        lx, jx, eager = (recs[(w, "", s)] for s in ("lazyxla", "jax", "eager"))
        for f in TRAIN_FIELDS:
            assert lx.get(f) is not None, (w, f)
        assert lx["compiles_per_step"] == 0 and lx["graphs_per_step"] >= 1
        assert lx["donors_per_graph"] > 0 and lx["memory"]["alias_size_in_bytes"] > 0
        assert jx["compiles_per_step"] == 0 and jx["donors_per_graph"] > 0
        for r in (lx, eager):
            assert len(r["losses"]) == len(jx["losses"]) == 5
            assert abs(r["losses"][0] - jx["losses"][0]) <= 1e-3 * abs(jx["losses"][0])
    api, loop = recs[("accum", "api", "lazyxla")], recs[("accum", "python-loop", "lazyxla")]
    assert api["traced_ops_per_step"] < loop["traced_ops_per_step"]     # one micro-batch traced, not all
    for r in (api, loop, recs[("accum", "", "eager")]):
        assert r["ok"] and abs(r["losses"][0] - recs[("accum", "", "jax")]["losses"][0]) <= 1e-4 * r["losses"][0]
    assert api["compiles_per_step"] == 0 and api["graphs_per_step"] == 1
    t = recs[("trace", "", "lazyxla")]
    assert t["ops"] == 200 and t["trace_us_per_op"]["median"] > 0 and t["first_trace_us_per_op"] > 0
    assert t["compiles_per_step"] == 0
    assert abs(t["result"] - recs[("trace", "", "jax")]["result"]) < 1e-5
    assert "W4 trace" in (out / "results.md").read_text()


@pytest.mark.slow
def test_quick_amp_bf16_mlp(tmp_path):
    """--amp bf16: W1 also trains under autocast on lazyxla and eager, in rows of its
    own; lazyxla compiles nothing after warm-up and runs nothing on the host."""
    out, recs = _run(tmp_path, "--workloads", "mlp", "--systems", "lazyxla,eager", "--amp", "bf16")
    assert sorted(recs) == sorted((("mlp", v, s) for v in ("", "amp-bf16") for s in ("lazyxla", "eager")))
    amp_lx, amp_eager = recs[("mlp", "amp-bf16", "lazyxla")], recs[("mlp", "amp-bf16", "eager")]
    for r in (amp_lx, amp_eager):
        assert r["ok"], r.get("error")
        assert r["amp"] == "bf16" and len(r["losses"]) == 5
    assert amp_lx["compiles_per_step"] == 0 and amp_lx["fallbacks_per_step"] == 0
    assert abs(amp_lx["losses"][0] - amp_eager["losses"][0]) <= 1e-2 * abs(amp_eager["losses"][0])
    # bf16 rounding shows: the autocast loss is not the float32 one to the last bit
    assert amp_lx["losses"][0] != recs[("mlp", "", "lazyxla")]["losses"][0]
    assert "| mlp[amp-bf16] | lazyxla |" in (out / "results.md").read_text()


def test_quick_compiled_training_matches_lazy_mode(tmp_path):
    """The compiled system (model, loss and optimizer step under torch.compile) trains
    W1 like lazy mode, dispatches a fraction of its ops and compiles nothing steady."""
    _, recs = _run(tmp_path, "--workloads", "mlp", "--systems", "lazyxla,lazyxla_compiled")
    lazy, compiled = recs[("mlp", "", "lazyxla")], recs[("mlp", "", "lazyxla_compiled")]
    assert compiled["ok"], compiled.get("error")
    assert compiled["compiles_per_step"] == 0 and compiled["graphs_per_step"] == 1
    assert 3 * compiled["traced_ops_per_step"] <= lazy["traced_ops_per_step"]
    assert compiled["donors_per_graph"] == lazy["donors_per_graph"] > 0
    for a, b in zip(compiled["losses"], lazy["losses"]):
        assert abs(a - b) <= 1e-4 * abs(b)
