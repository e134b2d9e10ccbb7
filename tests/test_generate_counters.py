"""Hugging Face generate() with a static cache, counted per token (issue 46): after warm-up a
token is one call of one cached executable, compiled mode (`torch.compile(model.forward)`)
and lazy mode alike, and (issue 51) with a compiled forward the read ending it is a captured
replay, with no graph walk and no donor plan; every layer's K and V are donated by every graph that runs the model
step, by default and with host replays off, and under the TPU backend's policies, captured or
not; the tokens equal eager PyTorch's. Counters and values only (docs/design.md "A decode
token is one executable call", "A captured step")."""
import contextlib
from typing import Iterator

import pytest
import torch

import lazyxla as lx
from lazyxla import config, metrics
from lazyxla.compile import cache

from helpers import backend_as

transformers = pytest.importorskip("transformers")
LAYERS = 2
BATCH, PROMPT, TOKENS = 2, 8, 6
KV_HEADS, HEAD_DIM = 2, 8


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=LAYERS, num_attention_heads=4,
                                   num_key_value_heads=KV_HEADS, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


def _gpt2():
    torch.manual_seed(0)
    # 4 heads of 8: the static cache holds 4 K/V heads per layer
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=LAYERS, n_head=4, n_positions=128,
                                  bos_token_id=1, eos_token_id=1)
    return transformers.GPT2LMHeadModel(cfg).eval()


MODELS = {"llama": (_llama, KV_HEADS), "gpt2": (_gpt2, 4)}


def _prompt(seed: int = 1) -> torch.Tensor:
    return torch.randint(2, 128, (BATCH, PROMPT), generator=torch.Generator().manual_seed(seed))


def _generate(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids.to(model.device), max_new_tokens=TOKENS, min_new_tokens=TOKENS,
                              do_sample=False, cache_implementation="static").cpu()


def _kv_bytes(heads: int) -> int:
    """Bytes of one layer's K (or V) of the static cache (float32; generate() sizes it for
    the prompt and every new token but the last, whose K and V nothing reads)."""
    return BATCH * heads * (PROMPT + TOKENS - 1) * HEAD_DIM * 4


def _donating_graphs(heads: int) -> int:
    """Executed graphs that donated at least every layer's K and V (DonatedBytes samples)."""
    data = metrics.metric_data("DonatedBytes")
    return 0 if data is None else sum(value >= 2 * LAYERS * _kv_bytes(heads) for _, value in data[2])


def _alias_counts() -> list:
    data = metrics.metric_data("InputOutputAliasCount")
    return [] if data is None else [int(value) for _, value in data[2]]


def _check_steady_tokens(model, ref: torch.Tensor, heads: int, compiled: bool) -> None:
    """A second generate() of the warmed-up model: tokens as eager, one executable call a
    token (prefill included), no compile, no new executable, K and V donated each token;
    with a compiled forward, each token's read replayed as captured."""
    executables = cache.cache_size()
    metrics.clear_all()
    assert torch.equal(_generate(model, _prompt()), ref)
    assert metrics.counter_value("ExecuteComputation") == TOKENS
    assert metrics.counter_value("CachedCompile") == TOKENS
    if compiled:   # the read ending each token replays the split and executable recorded for
        # it (sync/read_capture.py): no graph walk, no donor plan, no key
        assert metrics.counter_value("StepCaptureReplay") == TOKENS
        assert metrics.counter_value("GraphCollect") is None
        assert metrics.counter_value("DonorPlan") is None
    assert metrics.counter_value("UncachedCompile") is None
    assert metrics.counter_value("DynamoCompile") is None
    assert cache.cache_size() == executables
    # every decode token; the prefill fills a cache generate() has just made (pending zeros):
    # it has no buffer to donate
    assert _donating_graphs(heads) == TOKENS - 1
    report = lx.debug.donation_report()
    assert report is not None
    kv = [p for p in report.params if p["donated"] and len(p["shape"]) == 4]
    assert len(kv) == 2 * LAYERS


def _warm_up(model, ref: torch.Tensor, heads: int) -> None:
    """The first generate(): the decode graph's compile records every layer's K and V as
    donors (InputOutputAliasCount: one sample per compile)."""
    metrics.clear_all()
    assert torch.equal(_generate(model, _prompt()), ref)
    assert max(_alias_counts()) >= 2 * LAYERS, _alias_counts()
    assert _donating_graphs(heads) == TOKENS - 1


@contextlib.contextmanager
def _on_device(kind: str, compiled: bool) -> Iterator[tuple]:
    """(model on lazyxla's device, eager's tokens, its KV heads); the forward compiled if asked."""
    make, heads = MODELS[kind]
    model = make()
    ref = _generate(model, _prompt())
    model.to(lx.device())
    if compiled:
        model.forward = torch.compile(model.forward, backend="lazyxla")
    try:
        yield model, ref, heads
    finally:
        torch._dynamo.reset()
        model.to("cpu")


@pytest.mark.usefixtures("host_replay")
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_static_cache_token_is_one_executable_call(kind, compiled):
    with _on_device(kind, compiled) as (model, ref, heads):
        _warm_up(model, ref, heads)
        _check_steady_tokens(model, ref, heads, compiled)
        if compiled:   # the forward is replayed, not traced: what is traced is generate()'s own
            assert metrics.counter_value("CompiledGraphCaptures") is None


@pytest.mark.usefixtures("host_replay")
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_captured_tokens_donate_as_the_uncaptured_path(kind):
    """generate() with a compiled forward, the read capture on and off: the same tokens
    (eager's), the same executable calls and the same donated bytes per graph; only the
    capture's walks and plans differ (none on a replayed token, one a token without)."""
    runs = {}
    with _on_device(kind, compiled=True) as (model, ref, heads):
        # the first call of each compiles or records; the second is counted
        for capture in (False, False, True, True):
            with config.override(step_capture=capture):
                metrics.clear_all()
                assert torch.equal(_generate(model, _prompt()), ref)
                runs[capture] = {name: metrics.counter_value(name) or 0 for name in
                                 ("ExecuteComputation", "GraphCollect", "DonorPlan", "StepCaptureReplay")}
                runs[capture]["donated"] = [int(v) for _, v in metrics.metric_data("DonatedBytes")[2]]
    off, on = runs[False], runs[True]
    assert on["donated"] == off["donated"] and on["ExecuteComputation"] == off["ExecuteComputation"] == TOKENS
    assert off["GraphCollect"] == off["DonorPlan"] == TOKENS and off["StepCaptureReplay"] == 0
    assert on["GraphCollect"] == on["DonorPlan"] == 0 and on["StepCaptureReplay"] == TOKENS
    assert lx.debug.step_capture() == ("replayed", "host read")


@pytest.mark.usefixtures("host_replay")
def test_tpu_policies_keep_the_token_one_donating_call():
    """The TPU backend's policies (packed scalars, no kept barriers) over JAX's CPU: the
    decode step stays on the device, one call a token, K and V donated."""
    with backend_as("tpu"), _on_device("llama", compiled=True) as (model, ref, heads):
        _warm_up(model, ref, heads)
        _check_steady_tokens(model, ref, heads, compiled=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_host_replays_off_every_model_step_donates_the_cache(compiled):
    """Host reads and bookkeeping replays off (the suite's default): the stopping checks run
    on the device too, so a token runs more than one graph, but every graph that runs the
    model step donates every layer's K and V, and the donation report shows it."""
    with _on_device("llama", compiled) as (model, ref, heads):
        metrics.clear_all()
        assert torch.equal(_generate(model, _prompt()), ref)
        assert metrics.counter_value("HostEvaluatedRead") is None
        assert metrics.counter_value("HostBookkeepingRead") is None
        assert _donating_graphs(heads) == TOKENS - 1
        assert max(_alias_counts()) >= 2 * LAYERS
        assert lx.debug.donation_report() is not None


@pytest.mark.parametrize("replays", [True, False], ids=["host-replays", "replays-off"])
def test_issue_shape_model_synced_first_decodes_on_the_device(replays, request):
    """Issue 51 item 6, as reported: a Llama of 2 layers and hidden 64 whose weights were
    synced to the device before generate(). Every decode token runs its model step as a
    device graph donating every layer's K and V, host replays on or off: a host replay
    never takes a graph that reads a weight (sync/host_eval.py)."""
    if replays:
        request.getfixturevalue("host_replay")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=LAYERS, num_attention_heads=4,
                                   num_key_value_heads=KV_HEADS, max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ref = _generate(model, _prompt())
    model.to(lx.device())
    lx.sync()
    try:
        metrics.clear_all()
        assert torch.equal(_generate(model, _prompt()), ref)
        assert metrics.counter_value("ExecuteComputation") >= TOKENS
        kv_bytes = 2 * LAYERS * BATCH * KV_HEADS * (PROMPT + TOKENS - 1) * (64 // 4) * 4
        donated = [value for _, value in metrics.metric_data("DonatedBytes")[2]]
        assert sum(value >= kv_bytes for value in donated) == TOKENS - 1, donated
        assert max(_alias_counts()) >= 2 * LAYERS
        assert lx.debug.donation_report() is not None
    finally:
        model.to("cpu")
