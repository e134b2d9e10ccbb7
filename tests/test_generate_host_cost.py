"""What compiled Hugging Face generate() costs the host per decode token, in counts (issue 46
item 2): tokens equal eager; one host read, one executable call, no upload outside the call
(the host's bookkeeping values travel as the call's arguments), at most two downloads, and
the traced and host-replayed ops pinned at today's numbers. Per decode token = the
difference of two generate() lengths. Counters only, never timings (docs/benchmarks.md
"generate()'s per-token host cost under lazyxla")."""
import pytest
import torch

import lazyxla as lx
from lazyxla import metrics
from lazyxla.runtime import execute, transfer

transformers = pytest.importorskip("transformers")
SHORT, LONG = 4, 10
# tiny Llama, batch 2, static cache, greedy, with the installed transformers (2026-12-06)
TRACED_OPS = 71          # generate()'s own ops traced a token (the forward is replayed)
HOST_OPS = 53            # of them, computed on the host (sync/host_split.py)
DOWNLOADS = 2            # the next tokens, and layer 0's cache length from the forward


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


def _generate(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids.to(model.device), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              pad_token_id=0, cache_implementation="static").cpu()


def _samples(name: str) -> int:
    data = metrics.metric_data(name)
    return 0 if data is None else data[0]


def _counts(model, ids: torch.Tensor, n: int, ref: torch.Tensor) -> dict:
    metrics.clear_all()
    with lx.debug.host_timeline() as rec:
        out = _generate(model, ids, n)
    assert torch.equal(out, ref)
    counts = {name: metrics.counter_value(name) or 0 for name in
              ("ExecuteComputation", "TracedOps", "HostBookkeepingOps", "HostBookkeepingRead", "UncachedCompile")}
    counts["uploads"] = _samples("TransferToDeviceTime")
    counts["downloads"] = _samples("TransferFromDeviceTime")
    counts["host reads"] = sum(event[0] == "host read" for event in rec.events)
    return counts


@pytest.mark.usefixtures("host_replay")
def test_compiled_generate_decode_token_host_counts():
    model = _llama()
    ids = torch.randint(2, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    refs = {n: _generate(model, ids, n) for n in (SHORT, LONG)}
    model.to(lx.device())
    model.forward = torch.compile(model.forward, backend="lazyxla")
    try:
        _generate(model, ids, SHORT)    # warm-up: prefill and decode compiled
        short, long = (_counts(model, ids, n, refs[n]) for n in (SHORT, LONG))
    finally:
        torch._dynamo.reset()
        model.to("cpu")
    per_token = {k: (long[k] - short[k]) / (LONG - SHORT) for k in long}
    assert long["UncachedCompile"] == 0
    assert per_token["ExecuteComputation"] == 1
    assert per_token["host reads"] == 1
    assert per_token["HostBookkeepingRead"] == 1
    assert per_token["uploads"] == 0, per_token    # staged values go with the call (runtime/execute.py)
    assert per_token["downloads"] <= DOWNLOADS, per_token
    assert per_token["TracedOps"] <= TRACED_OPS, per_token
    assert per_token["HostBookkeepingOps"] <= HOST_OPS, per_token


def test_staged_value_is_an_argument_unless_donated():
    """A value the host computed goes to the call as its host array and stays staged (a later
    graph passes it again); a donated one is placed on the device first, for the donation
    to consume a buffer of the device's own."""
    kept = transfer.staged(torch.tensor([[3], [4]]), 0)
    donated = transfer.staged(torch.tensor([[5], [6]]), 0)
    args = execute._param_args([kept, donated], (1,), 0)
    assert args[0] is kept.host and kept.host is not None
    assert donated.host is None and args[1] is donated.array
    assert torch.equal(kept.host_copy, torch.tensor([[3], [4]]))
    assert args[1].tolist() == [[5], [6]]
