"""The generation benchmark (lazyxla/bench/generate.py): the JAX limit decodes the tokens
eager's generate() gives, rounds keep the fastest figures, and the bench runs end to end."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
from lazyxla.bench import generate, jax_decode  # noqa: E402
from helpers import child_env


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_jax_decode_equals_eager_generate(name):
    torch.manual_seed(0)
    if name == "gpt2":   # the bench's GPT-2 is 124M; a small one has the same code path
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2,
                                                                     n_head=4, n_positions=64)).eval()
    else:
        model = generate.build_model("llama")
    ids = generate.prompt(model, 2, 8)
    ref, _ = generate.timed_generate(model, ids, 10, "static")
    decoder = jax_decode.Decoder(model)
    for _ in range(2):   # the second call reuses the compiled steps
        out, _ = decoder.generate(ids, 10)
        assert torch.equal(out, ref)


def test_unknown_model_type_is_refused():
    model = transformers.BertModel(transformers.BertConfig(hidden_size=16, num_hidden_layers=1,
                                                           num_attention_heads=2, intermediate_size=16))
    with pytest.raises(ValueError, match="no JAX decode step for model type 'bert'"):
        jax_decode.Decoder(model)


def _cell(system, seconds, ids, prefill=0.1):
    calls = [{"seconds": seconds, "compiles": 2, "ids": ids}, {"seconds": seconds / 2, "compiles": 0, "ids": ids}]
    return {"form": "generate", "model": "m", "system": system, "batch": 1, "tokens": 1, "dtype": "float32",
            "calls": calls, "prefill": prefill, "decode_steps_per_s": 1 / seconds, "decode_tokens_per_s": 1 / seconds}


def test_rounds_keep_the_fastest_figures_and_compare_tokens():
    cells = [_cell("eager", 1.0, [[0, 1]]), _cell("lazyxla", 2.0, [[0, 1]]), _cell("eager", 0.5, [[0, 1]]),
             _cell("lazyxla", 3.0, [[0, 2]]), {"form": "generate", "model": "m", "system": "jax", "batch": 1,
                                              "error": ["boom"]}]
    rows = generate.table(cells).splitlines()[2:]
    assert rows[0].startswith("| generate | m | float32 | 1 | eager | 0.50 | 0.250 | 0.100 | 2.0 | 2.0 | 2.0 | "
                              "2 / 0 | reference | not checked |")
    # round 2's tokens differ from round 1's: not "yes"
    assert rows[1].startswith("| generate | m | float32 | 1 | lazyxla | 2.00 | 1.000 |")
    assert rows[1].endswith("| 1/1, rounds differ | not checked |")
    assert "failed: boom" in rows[2]


@pytest.mark.slow
def test_bench_runs_end_to_end():
    # lazyxla's defaults, not the suite's (tests/conftest.py turns host reads off)
    env = {k: v for k, v in child_env().items() if not k.startswith("LAZYXLA_HOST_")}
    done = subprocess.run([sys.executable, "-m", "lazyxla.bench.generate", "--models", "llama", "--tokens", "3",
                           "--systems", "lazyxla,compiled,jax"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| generate | llama |")]
    assert [r.split("|")[5].strip().split(" (")[0] for r in rows] == ["eager", "lazyxla", "compiled", "jax"]
    assert all(r.split("|")[-3].strip() in ("yes", "reference") for r in rows), done.stdout
    lazy = rows[1].split("|")
    assert lazy[12].strip() == "2 / 0"   # prefill and decode compiled once, nothing on the second call
