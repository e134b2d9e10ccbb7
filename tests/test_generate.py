"""Hugging Face generate() on lazyxla, unchanged: tokens equal eager, work linear in the
tokens, the static-cache decode step compiled once and its KV cache donated
(sync/host_split.py, docs/design.md "Bookkeeping on the host")."""
import pytest
import torch

import lazyxla as lx
from lazyxla import metrics

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("host_replay")
LAYERS = 2


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=LAYERS, n_head=4, n_positions=128)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _prompt(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(seed))


def _both(model, ids, **kw):
    """(eager tokens, lazyxla tokens) of the same generate() call."""
    kw.setdefault("do_sample", False)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        lazy = model.to(lx.device()).generate(ids.to(lx.device()), **kw).cpu()
    model.to("cpu")
    return ref, lazy


def test_greedy_default_cache_equals_eager_one_graph_a_token(checked_ir):
    model = _llama()   # eos_token_id is set: every token's stop check reads the tokens
    ref, lazy = _both(model, _prompt(), max_new_tokens=6, min_new_tokens=6)
    assert torch.equal(ref, lazy)
    # one device graph a token (prefill included); the bookkeeping ran on the host
    assert metrics.counter_value("ExecuteComputation") == 6
    assert metrics.counter_value("HostBookkeepingRead") >= 6


def test_gpt2_default_cache_with_pad_token_equals_eager():
    ref, lazy = _both(_gpt2(), _prompt(), max_new_tokens=5, pad_token_id=0, eos_token_id=1)
    assert torch.equal(ref, lazy)
    assert metrics.counter_value("ExecuteComputation") <= 5


def _generate(model, ids, n: int, **kw):
    with torch.no_grad():
        return model.generate(ids.to(lx.device()), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              cache_implementation="static", **kw).cpu()


def test_static_cache_compiles_once_and_donates_the_cache():
    model = _llama()
    with torch.no_grad():
        ref = model.generate(_prompt(), max_new_tokens=40, min_new_tokens=40, do_sample=False,
                             cache_implementation="static")
    model.to(lx.device())
    _generate(model, _prompt(), 8)                  # warm-up: prefill and decode compiled
    metrics.clear_all()
    out = _generate(model, _prompt(), 40)
    assert torch.equal(out, ref)
    assert (metrics.counter_value("UncachedCompile") or 0) <= 2
    report = lx.debug.donation_report()
    kv = [p for p in report.params if p["donated"] and len(p["shape"]) == 4]
    assert len(kv) >= 2 * LAYERS                    # every layer's K and V, in place
    metrics.clear_all()
    _generate(model, _prompt(seed=7), 40)           # another prompt of the same shape
    assert metrics.counter_value("UncachedCompile") is None
    model.to("cpu")


def test_beam_search_equals_eager():
    ref, lazy = _both(_llama(), _prompt(), max_new_tokens=4, min_new_tokens=4, num_beams=2)
    assert torch.equal(ref, lazy)


def test_sampling_is_reproducible_for_a_seed():
    model = _llama().to(lx.device())
    ids = _prompt().to(lx.device())
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        with torch.no_grad():
            runs.append(model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=True, top_k=20,
                                       top_p=0.9, cache_implementation="static").cpu())
    assert torch.equal(runs[0], runs[1])
    assert runs[0].shape == (2, 14) and int(runs[0].min()) >= 0 and int(runs[0].max()) < 128


@pytest.mark.slow
def test_default_cache_graph_size_stays_flat():
    model = _llama().to(lx.device())
    sizes = {}
    api = __import__("sys").modules["lazyxla.sync.pipeline"]
    for n in (8, 40):
        with torch.no_grad():
            model.generate(_prompt().to(lx.device()), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        sizes[n] = api.LastGraph.n_nodes
    assert sizes[40] <= 1.25 * sizes[8]


# -- the mechanism, on a hand-written loop ------------------------------------------------------

def test_growing_token_list_keeps_the_step_graph(dev):
    """A loop that appends each step's argmax to a growing id tensor and reads a stop flag:
    the growing tensor and the flag are bookkeeping, so the step compiles once."""
    torch.manual_seed(0)
    w = torch.randn(16, 16)
    table = torch.randn(16, 16)
    ids_cpu = torch.tensor([[3]])
    wd, td, ids = w.to(dev), table.to(dev), ids_cpu.to(dev)
    compiles = []
    for step in range(6):
        last = ids[:, -1]
        nxt = torch.argmax(td[last] @ wd, dim=-1)
        ids = torch.cat([ids, nxt[:, None]], dim=-1)
        before = metrics.counter_value("UncachedCompile") or 0
        stop = bool((ids == 15).any())
        compiles.append((metrics.counter_value("UncachedCompile") or 0) - before)
        ref_next = torch.argmax(table[ids_cpu[:, -1]] @ w, dim=-1)
        ids_cpu = torch.cat([ids_cpu, ref_next[:, None]], dim=-1)
        assert stop == bool((ids_cpu == 15).any())
    assert torch.equal(ids.cpu(), ids_cpu)
    assert sum(compiles[1:]) == 0, compiles


def test_host_bookkeeping_off_compiles_every_length(dev):
    from lazyxla import config
    with config.override(host_bookkeeping_max_elements=0):
        ids = torch.tensor([[1, 2]]).to(dev)
        w = torch.randn(4, 4).to(dev)
        for _ in range(3):
            ids = torch.cat([ids, torch.argmax(w[ids[:, -1]], dim=-1)[:, None]], dim=-1)
            bool(ids.sum() > 0)
        assert metrics.counter_value("HostBookkeepingRead") is None
        assert metrics.counter_value("UncachedCompile") == 3


def test_write_through_a_view_replays_on_the_host(dev):
    """VIEW_SCATTER (an in-place write into a view) is bookkeeping too: beam search's
    `running_beam_indices[:, :, t] = ...`."""
    base = torch.zeros(2, 3, 4, dtype=torch.int64)
    lazy = base.to(dev)
    w = torch.randn(3, 3).to(dev)
    src = torch.argmax(w, dim=-1)                   # computed on the device
    lazy[:, :, 2] = src
    expect = base.clone()
    expect[:, :, 2] = torch.argmax(w.cpu(), dim=-1)
    assert torch.equal(lazy.cpu(), expect)
    assert metrics.counter_value("HostBookkeepingRead") == 1


def test_read_does_not_donate_what_it_reads(dev):
    """A host read donates for the live tensors it materializes alongside, never the
    buffer of a tensor it reads (as upstream's `.cpu()` does not donate)."""
    t = torch.ones(3).to(dev)
    lx.sync()
    t.add_(1)
    assert t.cpu().tolist() == [2.0, 2.0, 2.0]
    report = lx.debug.donation_report()
    assert report.donors == 0


def test_offsets_stay_out_of_the_signature(dev):
    """An op whose outputs alias no operand keys its operands without their storage
    offsets (frontend/opinfo.py): `neg(t[1:3])` and `neg(t[2:4])` share a signature, so
    a graph reading such a slice from an upload keys alike at every position."""
    t = torch.arange(6.0).to(dev)
    first, second = -(t[1:3]), -(t[2:4])
    assert first._st.value.sig == second._st.value.sig
    assert t[1:3]._view is not None and t[1:3].storage_offset() != t[2:4].storage_offset()
    assert first.cpu().tolist() == [-1.0, -2.0] and second.cpu().tolist() == [-2.0, -3.0]


def test_compiled_forward_with_static_cache_replays_each_token():
    """The compiled path transformers documents for XLA: `torch.compile(model.forward)` with
    a static cache. The decode forward is captured once; later tokens replay it (no ATen
    op of the model dispatched), and a second call compiles and captures nothing."""
    model = _llama()
    with torch.no_grad():
        ref = model.generate(_prompt(), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                             cache_implementation="static")
    model.to(lx.device())
    _generate(model, _prompt(), 12)
    metrics.clear_all()
    assert torch.equal(_generate(model, _prompt(), 12), ref)
    traced_lazy = metrics.counter_value("TracedOps")
    model.forward = torch.compile(model.forward, backend="lazyxla")
    try:
        first = _generate(model, _prompt(), 12)
        assert torch.equal(first, ref)
        metrics.clear_all()
        second = _generate(model, _prompt(), 12)
        assert torch.equal(second, ref)
        assert metrics.counter_value("UncachedCompile") is None
        assert metrics.counter_value("DynamoCompile") is None
        # what remains traced is generate()'s own bookkeeping around the model call
        assert metrics.counter_value("TracedOps") < traced_lazy / 2
        assert metrics.counter_value("ExecuteComputation") == 12
    finally:
        torch._dynamo.reset()
        del model.forward


def test_hand_written_static_cache_loop_compiles_nothing_per_token(dev):
    """A decoding loop as PyTorch/XLA users write it: static cache, the cache position kept
    on the device, a barrier a token. After the first decode token no graph compiles, and
    each token's graph donates every layer's K and V."""
    model = _llama()
    cfg = model.config
    ids = _prompt()
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=10, min_new_tokens=10, do_sample=False,
                             cache_implementation="static")
    model.to(dev)
    cache = transformers.StaticCache(config=cfg, max_cache_len=32)
    tokens, compiles = [], []
    with torch.no_grad():
        out = model(ids.to(dev), past_key_values=cache, cache_position=torch.arange(8, device=dev))
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        position = torch.tensor([8], device=dev)
        lx.sync()
        for _ in range(9):
            tokens.append(nxt)
            before = metrics.counter_value("UncachedCompile") or 0
            out = model(nxt, past_key_values=cache, cache_position=position)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            position = position + 1
            lx.sync()
            compiles.append((metrics.counter_value("UncachedCompile") or 0) - before)
            kv = [p for p in lx.debug.donation_report().params if p["donated"] and len(p["shape"]) == 4]
            assert len(kv) == 2 * LAYERS
        tokens.append(nxt)
    assert torch.equal(torch.cat([ids] + [t.cpu() for t in tokens], dim=1), ref)
    assert sum(compiles[1:]) == 0, compiles


@pytest.mark.slow
def test_generate_example_runs(capsys):
    from lazyxla.examples import generate
    generate.main(["--tokens", "4", "--compiled"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("lazyxla", "compiled"))]
    assert len(rows) == 4 and all(line.endswith("tokens equal eager: True") for line in rows)
    assert " 0 compiles" in rows[1] and " 0 compiles" in rows[3]   # second calls


def test_host_value_updated_in_place_is_uploaded_and_donated(dev):
    """A value the host computed for a read stays staged; an in-place update then uploads
    it with the step's graph (runtime/transfer.py `place_staged`) and donates it, and
    neither the value read before nor the new one is disturbed."""
    w = torch.randn(4, 4)
    ids = torch.tensor([[1, 2]]).to(dev)
    ids = torch.cat([ids, torch.argmax(w.to(dev)[ids[:, -1]], dim=-1)[:, None]], dim=-1)
    first = ids.cpu()
    assert metrics.counter_value("HostBookkeepingRead") == 1
    expect = [[1, 2, int(torch.argmax(w[2]))]]
    ids.add_(1)
    lx.sync()
    assert lx.debug.donation_report().donors == 1
    assert first.tolist() == expect
    assert ids.cpu().tolist() == [[v + 1 for v in expect[0]]]


def test_large_constant_stays_on_the_device(dev):
    """generate()'s `min_new_tokens` masks `arange(vocab_size) == eos` every token: a value
    made from scalars alone, so bookkeeping by type, but the device computes it inside the
    graph for nothing while the host would compute and upload it every read."""
    torch.manual_seed(0)
    scores = torch.randn(2, 5000)
    ids_cpu = torch.tensor([[1, 2], [3, 4]])
    ids = ids_cpu.to(dev)
    lazy_scores = scores.to(dev)
    for step in range(3):
        mask = torch.arange(5000, device=dev) == 7
        nxt = torch.where(mask, -torch.inf, lazy_scores * (step + 1)).argmax(-1)
        ids = torch.cat([ids, nxt[:, None]], dim=-1)
        assert not bool((ids == 7).any())
        shapes = [tuple(p["shape"]) for p in lx.debug.donation_report().params]
        assert (5000,) not in shapes, shapes
        ref = torch.where(torch.arange(5000) == 7, -torch.inf, scores * (step + 1)).argmax(-1)
        ids_cpu = torch.cat([ids_cpu, ref[:, None]], dim=-1)
    assert torch.equal(ids.cpu(), ids_cpu)
    assert metrics.counter_value("HostBookkeepingRead") >= 3


def test_a_node_read_as_device_data_prints_and_keys_as_a_parameter(dev):
    """collect(leaves=...) reads a node as given device data (how a read's device graph
    takes the values the host computed): its operands leave the graph, its consumers read
    a parameter, and the printer names it so."""
    from lazyxla.ir.build import data_node
    from lazyxla.ir.printer import graph_text
    from lazyxla.runtime.transfer import staged
    from lazyxla.sync.collect import collect
    ids = torch.tensor([[1, 2, 3]]).to(dev)
    last = ids[:, -1:] + 0
    out = last * 2
    node = out._st.value
    leaf = data_node(staged(torch.tensor([[3]]), 0))
    graph, _ = collect(0, [(node, None)], leaves={id(last._st.value): leaf})
    assert len(graph.params) == 1 and graph.params[0] is leaf.data
    text = graph_text(graph)
    assert "= parameter 0" in text and "mul" in text
    plain, _ = collect(0, [(node, None)])
    assert len(plain.order) > len(graph.order)
    assert out.cpu().tolist() == [[6]]
