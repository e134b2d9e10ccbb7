"""The benchmark suite (lazyxla/bench): the JAX limit computes what torch
computes, the report and chart render, and the quick mode runs end to end in
subprocesses with sane, complete records."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import lazyxla as lx
from helpers import child_env, matmul_tolerance
from lazyxla.bench import flops, plan, report
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
    expected = wl.model(wl.inputs).detach()
    torch.testing.assert_close(torch.from_numpy(np.array(logits)), expected,
                               **matmul_tolerance(expected, rtol=1e-4, atol=1e-4))
    loss = jax_models.loss_fn(name)(params, jnp.asarray(wl.inputs.numpy()), jnp.asarray(wl.targets.numpy()))
    expected_loss = wl.loss(wl.model, wl.inputs, wl.targets).detach()
    torch.testing.assert_close(torch.tensor(float(loss)), expected_loss,
                               **matmul_tolerance(expected_loss, rtol=0, atol=1e-5))


def test_jax_autocast_policy_is_torchs():
    """The ops the bf16 JAX limit casts (jax_models.AUTOCAST_POLICY) have that policy in
    PyTorch's autocast lists, which lazyxla's autocast uses; the ones it leaves alone are in
    no list."""
    from lazyxla.frontend.autocast_lists import read_lists
    lists = dict(read_lists())
    assert {op: lists.get(op) for op in jax_models.AUTOCAST_POLICY} == jax_models.AUTOCAST_POLICY
    assert [op for op in jax_models.AUTOCAST_UNLISTED if op in lists or op.split(".")[0] in lists] == []


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_bf16_jax_limit_matches_lazyxla_under_autocast(name, dev):
    """The bf16 JAX limit computes what lazyxla computes under torch.autocast(bfloat16):
    bf16 logits within bf16's rounding, the same loss within the report's amp tolerance,
    and float32 gradients; not the float32 result (bf16 rounding shows)."""
    wl = make_workload(load_workloads(), name, plan.QUICK.with_gpt_size("proxy"))
    params = _params(wl.model)
    x, y = jnp.asarray(wl.inputs.numpy()), jnp.asarray(wl.targets.numpy())
    model = wl.model.to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        logits = model(wl.inputs.to(dev))
        loss = wl.loss(model, wl.inputs.to(dev), wl.targets.to(dev))
    jax_logits = jax_models.LOGITS[name](params, x, amp=jnp.bfloat16)
    assert logits.dtype == torch.bfloat16 and jax_logits.dtype == jnp.bfloat16
    expected = logits.detach().float().cpu()
    torch.testing.assert_close(torch.from_numpy(np.array(jax_logits, np.float32)), expected,
                               rtol=1.6e-2, atol=1.6e-2 * float(expected.abs().max()))
    jax_loss, grads = jax.value_and_grad(jax_models.loss_fn(name, amp=jnp.bfloat16))(params, x, y)
    assert abs(float(jax_loss) - loss.item()) <= report.LOSS_RTOL_AMP * abs(loss.item())
    assert float(jax_loss) != float(jax_models.loss_fn(name)(params, x, y))
    assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype("float32")}


# -- model FLOPs and MFU ---------------------------------------------------------------------

def test_gpt_sizes_build_the_named_w2():
    """--gpt-size picks W2's model and batch: the CPU proxy (d 64, 4 layers, seq 32,
    batch 2, vocab 4096), the reference and GPT-2 small's shape (built by config only:
    124M parameters)."""
    from lazyxla.bench.__main__ import parse_args
    assert parse_args(["--gpt-size", "gpt2"]).gpt_size == "gpt2" and parse_args([]).gpt_size is None
    wl = make_workload(load_workloads(), "gpt", plan.FULL.with_gpt_size("proxy"))
    cfg = wl.model.cfg
    assert (cfg.vocab, cfg.d, cfg.heads, cfg.layers, cfg.seq) == (4096, 64, 4, 4, 32)
    assert tuple(wl.inputs.shape) == tuple(wl.targets.shape) == (2, 32)
    assert plan.GPT_SIZES["gpt2"] == ({"vocab": 50304, "d": 768, "heads": 12, "layers": 12, "seq": 512}, 8)
    assert plan.FULL.with_gpt_size("reference") == plan.FULL
    with pytest.raises(ValueError, match="unknown GPT size 'huge'"):
        plan.FULL.with_gpt_size("huge")


def test_model_flops_count_matmul_parameters_and_attention():
    """6 * N * tokens + 12 * layers * d * seq * tokens, N without the lookup-only tables:
    W2's token and position embeddings are left out, its untied head counted; GPT-2's head
    is its token table (tied), which counts."""
    wl = make_workload(load_workloads(), "gpt", plan.FULL.with_gpt_size("proxy"))
    n = sum(p.numel() for name, p in wl.model.named_parameters() if not name.startswith(("tok.", "pos.")))
    tokens = 2 * 32
    assert flops.model_flops_per_step(wl.model, wl.inputs) == 6 * n * tokens + 12 * 4 * 64 * 32 * tokens
    mlp = make_workload(load_workloads(), "mlp", plan.FULL)
    assert flops.model_flops_per_step(mlp.model, mlp.inputs) == 6 * sum(p.numel() for p in mlp.model.parameters()) * 128
    pytest.importorskip("transformers")
    from lazyxla.bench.hf_models import build
    gpt2 = build("gpt2")
    n = sum(p.numel() for p in gpt2.parameters()) - gpt2.transformer.wpe.weight.numel()
    ids = torch.zeros(2, 8, dtype=torch.long)
    assert flops.model_flops_per_step(gpt2, ids) == 6 * n * 16 + 12 * 2 * 32 * 8 * 16


def test_report_mfu_beside_each_step_on_accelerators_only():
    """MFU = model FLOPs / median step / the device kind's peak; n/a on CPU and for a kind
    the table does not know."""
    peak = flops.PEAK_FLOPS["TPU v5 lite"]
    recs = [_fake("gpt", "lazyxla", 10.0, model_flops_per_step=0.25 * peak * 0.010,
                  versions={"device_kind": "TPU v5 lite"}),
            _fake("gpt", "jax", 5.0, model_flops_per_step=0.25 * peak * 0.010, versions={"device_kind": "TPU v5 lite"}),
            _fake("mlp", "lazyxla", 10.0, model_flops_per_step=1e9, versions={"device_kind": "cpu"}),
            _fake("mlp", "eager", 10.0, model_flops_per_step=1e9, versions={"device_kind": "TPU v9 imaginary"})]
    text = report.render(recs, {"mode": "quick"})
    assert "| gpt | lazyxla | 10.0 | 10.0 | 2.00x | 25.0% | 10.0 | 10.0 | 2.00x |" in text
    assert "| gpt | jax | 5.0 | 5.0 | 1.00x | 50.0% |" in text
    assert "| mlp | lazyxla | 10.0 | 10.0 | — | n/a |" in text and "| mlp | eager | 10.0 | 10.0 | — | n/a |" in text
    assert "TPU v5 lite: 197 TFLOP/s" in text and "TPU v9 imaginary: unknown (n/a)" in text


def test_report_headline_is_the_pipelined_step():
    """A training row leads with the pipelined step (no wait between steps) and its host
    share, against the JAX limit's pipelined step; the step that waits every time comes
    beside it, against the JAX limit's waiting step; MFU is the pipelined step's."""
    peak = flops.PEAK_FLOPS["TPU v5 lite"]
    kw = dict(model_flops_per_step=0.25 * peak * 0.012, versions={"device_kind": "TPU v5 lite"})
    recs = [_fake("gpt", "lazyxla", 20.0, pipelined_ms=12.0, pipelined_host_ms=11.0,
                  pipelined_counters={"device_waits": 0.0}, **kw),
            _fake("gpt", "jax", 10.0, pipelined_ms=6.0, pipelined_host_ms=0.1, **kw),
            _fake("trace", "lazyxla", 2.0, ops=200, trace_us_per_op={"median": 10.0})]
    text = report.render(recs, {"mode": "quick"})
    assert "| gpt | lazyxla | 12.0 | 11.0 | 2.00x | 25.0% | 20.0 | 20.0 | 2.00x |" in text
    assert "| gpt | jax | 6.0 | 0.1 | 1.00x | 50.0% | 10.0 | 10.0 | 1.00x |" in text
    assert "| 0.00 | — | 0 | ok |" in text   # device waits of a pipelined lazyxla step
    assert [report.headline_ms(r) for r in recs] == [12.0, 6.0, 2.0]   # W4: its median step


class _Loop:
    """A backend that records what the pipelined loop calls, in order."""
    def __init__(self):
        self.calls = []

    def begin_step(self):
        self.calls.append("begin")

    def mark_step(self):
        self.calls.append("barrier")

    def wait(self):
        self.calls.append("wait")

    def step_counters(self):
        self.calls.append("counters")
        return {"traced_ops": 30, "device_waits": 0, "fallback_ops": []}


def test_pipelined_loop_waits_once_after_all_steps():
    """torch_loops._pipelined: every step ends at its barrier with no wait; the one wait
    comes after the counters are read (it is the bench's, not the step's); counters are
    per step; the losses are read after the timing."""
    from lazyxla.bench.torch_loops import _pipelined
    loop = _Loop()
    values = iter([3.0, 2.0, 1.0])
    rec = _pipelined(loop, lambda: torch.tensor(next(values)), 3)
    assert loop.calls == ["begin", "barrier", "barrier", "barrier", "counters", "wait"]
    assert rec["pipelined_losses"] == [3.0, 2.0, 1.0]
    assert rec["pipelined_counters"] == {"traced_ops": 10.0, "device_waits": 0.0}
    assert rec["pipelined_ms"] >= rec["pipelined_host_ms"] > 0


def test_chart_is_optional(tmp_path, monkeypatch):
    """Without matplotlib no chart is drawn and the note says how to get it."""
    from lazyxla.bench import chart
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # `import matplotlib` raises ImportError
    path, note = chart.chart_or_note([_fake("mlp", "jax", 1.0)], str(tmp_path), "t")
    assert path is None and "pip install matplotlib" in note and f"lazyxla.bench.chart {tmp_path}" in note
    assert os.listdir(tmp_path) == []


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


def test_cells_amp_adds_mixed_precision_rows_for_training_only():
    cs = plan.cells(("mlp", "donate"), ("lazyxla", "eager", "jax"), amp="bf16")
    assert [c.label for c in cs] == ["mlp/lazyxla", "mlp/eager", "mlp/jax", "mlp[amp-bf16]/lazyxla",
                                     "mlp[amp-bf16]/eager", "mlp[amp-bf16]/jax", "donate[alias-on]/lazyxla",
                                     "donate[alias-off]/lazyxla", "donate[alias-on]/eager", "donate[alias-on]/jax",
                                     "donate[alias-off]/jax"]
    assert cs[3].amp == "bf16" and cs[0].amp is None and cs[3].aliasing
    with pytest.raises(ValueError, match="unknown amp dtype 'fp8'"):
        plan.cells(amp="fp8")


def test_report_amp_rows_compare_with_the_bf16_jax_limit():
    recs = [_fake("gpt", "lazyxla", 30.0, "amp-bf16", losses=[2.01]), _fake("gpt", "jax", 10.0, "amp-bf16",
                                                                           losses=[2.0]),
            _fake("gpt", "eager", 90.0, "amp-bf16", losses=[2.1]), _fake("gpt", "jax", 20.0, losses=[2.0])]
    text = report.render(recs, {"mode": "quick"})
    assert "| gpt[amp-bf16] | lazyxla | 30.0 | 30.0 | 3.00x |" in text   # against the bf16 limit, not float32's
    assert report.checks(recs) == ["gpt[amp-bf16]/eager: step-0 loss differs from jax by 5.0e-02 (relative)"]


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
    if workload in plan.TRAINING:
        rec.update(pipelined_ms=step, pipelined_host_ms=step)
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

def _run(tmp_path, *args, timeout=600, **env):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "lazyxla.bench", "--quick", "--no-progress", "--out", str(out),
                           *args], capture_output=True, text=True, timeout=timeout, env=child_env(**env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out / "stdout.txt").write_text(proc.stdout)
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


TRAIN_FIELDS = ("pipelined_ms", "pipelined_host_ms", "pipelined_counters", "step_ms", "trace_ms", "first_step_s", "compiles_per_step", "graphs_per_step", "donors_per_graph",
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
        assert len(jx["pipelined_losses"]) == len(lx["pipelined_losses"]) == 3 and jx["pipelined_ms"] > 0
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
    """--amp bf16: W1 also trains in bf16 mixed precision on lazyxla and eager (autocast)
    and the JAX limit (autocast's lists written out), in rows of its own; lazyxla compiles
    nothing after warm-up and runs nothing on the host; every step's loss agrees with the
    bf16 JAX limit's within the report's amp tolerance. --matmul-precision reaches lazyxla
    and the JAX limit (float32 on CPU at every level: float32 losses still agree)."""
    out, recs = _run(tmp_path, "--workloads", "mlp", "--systems", "lazyxla,eager,jax", "--amp", "bf16",
                     "--matmul-precision", "default")
    assert sorted(recs) == sorted((("mlp", v, s) for v in ("", "amp-bf16") for s in ("lazyxla", "eager", "jax")))
    amp = {s: recs[("mlp", "amp-bf16", s)] for s in ("lazyxla", "eager", "jax")}
    for r in amp.values():
        assert r["ok"], r.get("error")
        assert r["amp"] == "bf16" and len(r["losses"]) == 5
        assert r["model_flops_per_step"] == recs[("mlp", "", "jax")]["model_flops_per_step"] == 6 * 5_824_522 * 128
    assert amp["lazyxla"]["compiles_per_step"] == 0 and amp["lazyxla"]["fallbacks_per_step"] == 0
    for r in (amp["lazyxla"], amp["eager"]):
        for a, b in zip(r["losses"], amp["jax"]["losses"]):
            assert abs(a - b) <= report.LOSS_RTOL_AMP * abs(b)
    # bf16 rounding shows: the autocast loss is not the float32 one to the last bit
    assert amp["lazyxla"]["losses"][0] != recs[("mlp", "", "lazyxla")]["losses"][0]
    assert amp["jax"]["losses"][0] != recs[("mlp", "", "jax")]["losses"][0]
    assert abs(recs[("mlp", "", "lazyxla")]["losses"][0] - recs[("mlp", "", "jax")]["losses"][0]) <= 1e-6
    text = (out / "results.md").read_text()
    assert "| mlp[amp-bf16] | jax |" in text and "matmul precision: default" in text
    assert "| mlp[amp-bf16] | lazyxla |" in text and "MFU" in text


def test_quick_proxy_gpt_without_matplotlib(tmp_path):
    """--gpt-size proxy trains the CPU proxy of a TPU step; without matplotlib the run
    writes everything but the chart and says how to draw it."""
    hidden = tmp_path / "hidden" / "matplotlib"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by tests/test_bench.py')\n")
    out, recs = _run(tmp_path, "--workloads", "gpt", "--systems", "jax", "--gpt-size", "proxy",
                     PYTHONPATH=os.pathsep.join([str(hidden.parent), child_env()["PYTHONPATH"]]))
    r = recs[("gpt", "", "jax")]
    assert r["ok"], r.get("error")
    wl = make_workload(load_workloads(), "gpt", plan.QUICK.with_gpt_size("proxy"))
    assert r["n_params"] == sum(p.numel() for p in wl.model.parameters())
    assert r["model_flops_per_step"] == flops.model_flops_per_step(wl.model, wl.inputs)
    assert not (out / "bench.png").exists() and (out / "results.md").exists() and (out / "meta.json").exists()
    assert "gpt size: proxy" in (out / "results.md").read_text()
    assert "no chart: matplotlib is not installed" in (out / "stdout.txt").read_text()


def test_quick_compiled_training_matches_lazy_mode(tmp_path):
    """The compiled system (model, loss and optimizer step under torch.compile) trains
    W1 like lazy mode, dispatches a fraction of its ops and compiles nothing steady."""
    _, recs = _run(tmp_path, "--workloads", "mlp", "--systems", "lazyxla,lazyxla_compiled")
    lazy, compiled = recs[("mlp", "", "lazyxla")], recs[("mlp", "", "lazyxla_compiled")]
    assert compiled["ok"], compiled.get("error")
    assert compiled["compiles_per_step"] == 0 and compiled["graphs_per_step"] == 1
    assert 3 * compiled["traced_ops_per_step"] <= lazy["traced_ops_per_step"]
    assert compiled["donors_per_graph"] == lazy["donors_per_graph"] > 0
    for a, b in zip(compiled["losses"] + compiled["pipelined_losses"], lazy["losses"] + lazy["pipelined_losses"]):
        assert abs(a - b) <= 1e-4 * abs(b)
    # the pipelined steps (the headline): one graph a step, no compile, and nothing in
    # the step waits for the device or reads it back
    for r in (lazy, compiled):
        c = r["pipelined_counters"]
        assert (c["graphs"], c["compiles"], c["device_waits"], c["host_reads"]) == (1, 0, 0, 0)
        assert len(r["pipelined_losses"]) == 3 and r["pipelined_ms"] >= r["pipelined_host_ms"] > 0
    assert lazy["pipelined_counters"]["traced_ops"] == lazy["traced_ops_per_step"]
    # the compile seconds by owner: AOTAutograd within the backend call within dynamo's
    split = compiled["compile_split_s"]
    assert split["dynamo"] >= split["backend"] >= split["aot"] > 0 and split["xla"] > 0
    assert "compile_split_s" not in lazy


# -- depth, Hugging Face workloads, host phases ----------------------------------------------

def test_cells_layers_run_w2_at_each_depth_and_block_form():
    cs = plan.cells(("gpt", "mlp"), ("lazyxla", "jax"), layers=(1, 2))
    assert [c.label for c in cs] == ["mlp/lazyxla", "mlp/jax"] + [
        f"gpt[{v}]/{s}" for n in (1, 2) for v, s in ((f"layers-{n}", "lazyxla"), (f"layers-{n}", "jax"),
                                                      (f"layers-{n}-scan", "lazyxla"), (f"layers-{n}-stacked", "lazyxla"))]
    scan = cs[4]
    assert scan.depth == (1, "scan") and cs[2].depth == (1, "loop") and cs[0].depth is None
    config = scan.settings(plan.QUICK).gpt_config
    assert (config["layers"], config["scan"], config["stacked"], config["d"]) == (1, True, False, 64)
    assert cs[0].settings(plan.QUICK) is plan.QUICK
    assert plan.base_variant("layers-2-stacked") == "layers-2" and plan.base_variant("amp-bf16") == ""


def test_hf_workloads_run_only_when_named_and_without_a_jax_limit():
    from lazyxla.bench.__main__ import parse_args
    assert not set(plan.HF_TINY) & set(parse_args([]).workloads)
    cs = plan.cells(parse_args(["--workloads", "hf-t5", "--layers", "3"]).workloads, plan.SYSTEMS)
    assert [c.label for c in cs] == ["hf-t5/lazyxla", "hf-t5/lazyxla_compiled", "hf-t5/eager", "hf-t5/torch_xla"]
    wl = make_workload(load_workloads(), "hf-vit", plan.QUICK)
    assert wl.key == "pixel_values" and flops.model_flops_per_step(wl.model, wl.inputs) is None
    loss = wl.loss(wl.model, wl.inputs, wl.targets)
    assert loss.ndim == 0 and torch.isfinite(loss)


class _Recording:
    def __init__(self, events):
        self.events = events

    def summary(self):
        from lazyxla.runtime import timeline
        return timeline.summary(self.events)


class _TimelineLoop(_Loop):
    """A backend whose host timeline holds, per step, a trace from the last sync, a sync with
    a collect stage, and a graph on the device launched in the sync."""

    def __init__(self):
        super().__init__()
        self.events, self.t, self.last_sync = [], 0, None

    @contextlib.contextmanager
    def host_timeline(self):
        yield _Recording(self.events)

    def mark_step(self):
        super().mark_step()
        import time as _time
        now = _time.perf_counter_ns()
        if self.last_sync is not None:
            self.events.append(("trace", "host", self.last_sync, now - 3, {}))
        self.events += [("step barrier", "host", now - 3, now, {}), ("collect", "host", now - 2, now - 1, {}),
                        ("graph 1", "device", now - 1, now + 10**9, {})]
        self.last_sync = now


def test_phases_count_each_step_once_and_sum_the_device_graphs():
    """torch_loops._phases: one step runs before the counted ones, so that every counted
    step has its trace; the step before's sync stages and graph are not counted."""
    from lazyxla.bench.torch_loops import _phases
    loop = _TimelineLoop()
    phases = _phases(loop, lambda: None, 4)
    assert loop.calls == ["barrier"] * 5 + ["wait"]
    assert {k: v["count"] for k, v in phases.items()} == {"trace": 1, "step barrier": 1, "collect": 1, "device": 1}
    assert phases["device"]["ms"] >= 1000


def test_report_depth_and_phases_tables():
    recs = [_fake("gpt", "lazyxla", 5.0, "layers-2-scan", first_step_counters={"compile_s": 1.5},
                  phases={"collect": {"count": 1.0, "ms": 0.5}, "trace": {"count": 2.0, "ms": 3.0}},
                  first_step_phases={"compile": {"count": 1, "ms": 900.0}}),
            _fake("gpt", "jax", 1.0, "layers-2")]
    text = report.render(recs, {"mode": "quick"})
    assert "| 2 | scan | lazyxla | — | 1.50 | 5.0 |" in text and "| 2 | loop | jax |" in text
    rows = [line for line in text.splitlines() if line.startswith("| gpt[layers-2-scan] | lazyxla | ")]
    assert [r.split(" | ")[2] for r in rows[-3:]] == ["trace", "collect", "compile"]
    assert "| gpt[layers-2-scan] | lazyxla | 5.0 |" in text and "| 5.00x |" in text   # the same depth's JAX limit


def test_quick_hf_model_phases(tmp_path):
    """A tiny Hugging Face model trains like eager on lazyxla; --phases records its steady
    stages per step (one graph, two syncs: optimizer.step's implied barrier and lx.sync)
    and its first step's compile."""
    _, recs = _run(tmp_path, "--workloads", "hf-gpt2", "--systems", "lazyxla,eager", "--phases")
    lazy, eager = recs[("hf-gpt2", "", "lazyxla")], recs[("hf-gpt2", "", "eager")]
    assert lazy["ok"] and eager["ok"], (lazy.get("error"), eager.get("error"))
    torch.testing.assert_close(torch.tensor(lazy["losses"]), torch.tensor(eager["losses"]), rtol=1e-4, atol=1e-5)
    phases = lazy["phases"]
    for stage in ("implied step barrier (optimizer.step)", "step barrier", "collect", "plan", "key and cache",
                  "dispatch", "install"):
        assert phases[stage]["count"] == 1 and phases[stage]["ms"] > 0, stage
    assert phases["trace"]["count"] == 2   # before each of the two syncs
    assert phases["device"]["count"] == 1 and "compile" not in phases
    assert lazy["first_step_phases"]["compile"]["count"] == 1 and "phases" not in eager
