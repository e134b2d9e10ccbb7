"""The generation bench's loop form (lazyxla/bench/decode_loop.py) and its JAX limit
(lazyxla/bench/jax_decode.py): the PyTorch decode loop gives generate()'s tokens on eager,
lazyxla and compiled; the JAX loop gives eager's tokens for GPT-2 and Llama (float32), and
its bfloat16 logits are within a rounding of eager's; generate()'s floor runs generate()
on a stub; the table and JSON carry their fields."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import lazyxla as lx
from lazyxla import metrics

transformers = pytest.importorskip("transformers")
from lazyxla.bench import decode_loop, gen_models, generate, generate_floor, jax_decode  # noqa: E402
from helpers import child_env  # noqa: E402

TOKENS = 8


def _model(name: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    if name == "gpt2":   # the bench's GPT-2 is 124M; a small one has the same code path
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64)
        return transformers.GPT2LMHeadModel._from_config(cfg, dtype=dtype).eval()
    return gen_models.build_model("llama", dtype)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_eager_loop_equals_generate(name):
    model = _model(name)
    ids = gen_models.prompt(model, 2, 8)
    ref, _ = gen_models.timed_generate(model, ids, TOKENS, "static")
    timing = decode_loop.TorchDecodeLoop(model, torch.device("cpu")).run(ids, TOKENS)
    assert torch.equal(timing.ids, ref)
    assert 0 < timing.prefill_s <= timing.total_s


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("mode", ["lazy", "compiled", "compiled_step"])
def test_lazyxla_loop_equals_eager(name, mode):
    model = _model(name)
    ids = gen_models.prompt(model, 2, 8)
    ref = decode_loop.TorchDecodeLoop(model, torch.device("cpu")).run(ids, TOKENS).ids
    model.to(lx.device())
    forward = torch.compile(model.forward, backend="lazyxla") if mode == "compiled" else None
    compile_step = (lambda f: torch.compile(f, backend="lazyxla")) if mode == "compiled_step" else None
    loop = decode_loop.TorchDecodeLoop(model, lx.device(), barrier=lx.sync, wait=lx.wait_device_ops, forward=forward,
                                       compile_step=compile_step)
    assert torch.equal(loop.run(ids, TOKENS).ids, ref)
    metrics.clear_all()
    assert torch.equal(loop.run(ids, TOKENS).ids, ref)
    # the second call of the same shapes compiles nothing: the step traced the same graph each token
    assert (metrics.counter_value("UncachedCompile") or 0) == 0


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_jax_loop_equals_eager_loop(name):
    model = _model(name)
    ids = gen_models.prompt(model, 2, 8)
    ref = decode_loop.TorchDecodeLoop(model, torch.device("cpu")).run(ids, TOKENS).ids
    decoder = jax_decode.Decoder(model)
    for _ in range(2):
        out, prefill, total = decoder.run(ids, TOKENS)
        assert torch.equal(out, ref)
        assert 0 < prefill <= total
    assert decoder.compiles() in (0, 2)   # prefill and decode step; 0 where jax.jit hides its cache size


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_jax_bfloat16_logits_within_a_rounding_of_eager(name):
    # bfloat16 greedy tokens may flip on near-ties (the bench reports leading tokens equal);
    # the logits themselves must agree to about one bfloat16 rounding of their size
    model = _model(name, torch.bfloat16)
    ids = gen_models.prompt(model, 4, 8)
    with torch.no_grad():
        ref = model(ids).logits[:, -1].float().numpy()
    got = jax_decode.Decoder(model).prefill_logits(ids)
    assert got.dtype == np.float32 and got.shape == ref.shape
    ulp = np.abs(ref).max() * 2.0 ** -7
    assert np.abs(got - ref).max() <= 2 * ulp


def test_floor_runs_generate_on_a_stub():
    model = _model("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    generate_floor.stub_forward(model)
    ids = gen_models.prompt(model, 2, 8)
    out, seconds = gen_models.timed_generate(model, ids, TOKENS, "static")
    assert out.shape == (2, 8 + TOKENS) and (out[:, 8:] == 1).all() and seconds > 0
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_llama1b_config_is_the_documented_shape():
    # the 1B model's shape without building its 1.24 B weights
    cls, cfg = gen_models._config("llama1b")
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.intermediate_size, cfg.vocab_size, cfg.tie_word_embeddings) == (2048, 16, 32, 8, 8192, 128256, True)
    assert gen_models.DEFAULT_DTYPE["llama1b"] == torch.bfloat16
    assert 1.2e9 < gen_models.parameter_count("llama1b") < 1.3e9     # counted on the meta device
    assert gen_models.parameter_count("gpt2") < generate.EAGER_AUTO_MAX_PARAMS


def test_leading_equal_is_the_least_over_rows():
    ref = [[9, 1, 2, 3], [9, 4, 5, 6]]
    assert generate.leading_equal(ref, ref, 1) == 3
    assert generate.leading_equal([[9, 1, 2, 7], [9, 4, 0, 6]], ref, 1) == 1   # row 2 differs at its second
    assert generate.leading_equal([[9, 1]], ref, 1) == 0                        # another batch: nothing equal


def _cell(system, ids, batch=2, seconds=1.0, form="loop"):
    calls = [{"seconds": seconds, "prefill": 0.1, "compiles": 3, "ids": ids},
             {"seconds": seconds / 2, "prefill": 0.1, "compiles": 0, "ids": ids}]
    return {"form": form, "model": "m", "system": system, "batch": batch, "prompt": 1, "tokens": 2,
            "dtype": "float32", "chips": 1, "calls": calls, "prefill": 0.1, "decode_s": 0.4,
            "decode_steps_per_s": 2.5, "decode_tokens_per_s": 5.0}


def test_table_compares_with_eager_and_jax():
    ref = [[5, 1, 2], [5, 3, 4]]
    cells = [_cell("eager", ref), _cell("lazyxla", ref), _cell("compiled", [[5, 1, 0], [5, 3, 4]]),
             _cell("jax", ref), _cell("lazyxla", [[5, 1, 2]] * 8, batch=8), _cell("jax", [[5, 1, 2]] * 8, batch=8),
             {"form": "loop", "model": "m", "system": "compiled", "batch": 8, "error": ["timed out after 5 s"]}]
    rows = generate.table(cells).splitlines()
    header = [h.strip() for h in rows[0].split("|")[1:-1]]
    for field in ("prefill s", "decode tokens/s", "tokens/s per chip", "first call s", "tokens equal eager",
                  "tokens equal jax"):
        assert field in header
    by = {(r.split("|")[5].strip(), r.split("|")[4].strip()): [x.strip() for x in r.split("|")[1:-1]]
          for r in rows[2:]}
    assert by[("eager", "2")][-2:] == ["reference", "yes"]
    assert by[("lazyxla", "2")][-2:] == ["yes", "yes"]
    assert by[("compiled", "2")][-2:] == ["1/2", "1/2"]
    assert by[("lazyxla", "8")][-2:] == ["not checked", "yes"]   # no eager cell at batch 8
    assert by[("lazyxla", "2")][5:12] == ["1.00", "0.500", "0.100", "2.5", "5.0", "5.0", "3 / 0"]
    assert "failed: timed out after 5 s" in " ".join(by[("compiled", "8")])


def test_eager_auto_skips_the_1b_model():
    assert generate._with_eager(["lazyxla", "jax"], "gpt2", "auto") == ["eager", "lazyxla", "jax"]
    assert generate._with_eager(["eager", "lazyxla"], "llama1b", "auto") == ["lazyxla"]
    assert generate._with_eager(["lazyxla"], "llama1b", "yes") == ["eager", "lazyxla"]
    assert generate._with_eager(["eager", "lazyxla"], "gpt2", "no") == ["lazyxla"]


@pytest.mark.slow
def test_loop_bench_runs_end_to_end(tmp_path):
    # lazyxla's defaults, not the suite's (tests/conftest.py turns host reads off)
    env = {k: v for k, v in child_env().items() if not k.startswith("LAZYXLA_HOST_")}
    out = tmp_path / "cells.json"
    done = subprocess.run([sys.executable, "-m", "lazyxla.bench.generate", "--form", "loop", "--models", "llama",
                           "--batch", "1,2", "--tokens", "4", "--systems", "lazyxla,compiled,jax", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| loop | llama |")]
    systems = [r.split("|")[5].strip().split(" (")[0] for r in rows]   # "lazyxla (cpu)": the system
    assert systems == ["eager", "eager", "lazyxla", "lazyxla", "compiled", "compiled", "jax", "jax"]
    assert all(r.rstrip().endswith(("| yes |", "| reference |")) for r in rows), done.stdout
    assert all(r.split("|")[-3].strip() in ("yes", "reference") for r in rows), done.stdout
    cells = json.loads(out.read_text())
    assert {(c["system"], c["batch"]) for c in cells} == {(s, b) for s in ("eager", "lazyxla", "compiled", "jax")
                                                          for b in (1, 2)}
    for c in cells:
        assert {"prefill", "decode_tokens_per_s", "decode_steps_per_s", "chips", "calls", "dtype", "platform"} <= set(c)
        assert c["calls"][0]["seconds"] > 0 and len(c["calls"][0]["ids"]) == c["batch"]
