"""A captured step (sync/step_capture.py, issue 51): a compiled training step (forward,
backward, optimizer step under torch.compile(backend="lazyxla")) replays, from its third
step, as one executable call with no graph walk and no donor plan; losses and parameters
equal the uncaptured path's, donation counts are unchanged, a donated buffer still raises,
and a read in the middle of the step, much lazily traced work in it or a new shape fall back to the
ordinary barrier, which lx.debug.step_capture() names; a few lazily traced ops, lifted
scalars among them, are captured with the calls. Counters and values only."""
import copy

import pytest
import torch

import lazyxla as lx
from lazyxla import config, metrics
from lazyxla.sync import read_capture, step_capture

from helpers import assert_close, backend_as

STEPS = 5


def _counts() -> dict:
    return {name: metrics.counter_value(name) or 0 for name in
            ("ExecuteComputation", "GraphCollect", "DonorPlan", "StepCaptureReplay", "UncachedCompile")}


def _donated() -> list:
    data = metrics.metric_data("DonatedBytes")
    return [] if data is None else [int(v) for _, v in data[2]]


def _train(capture: bool, batch_of=lambda i: 4, mid_step=None) -> tuple:
    """STEPS compiled AdamW steps of a small MLP: (losses, final parameters, per-step
    counters, per-step donated bytes, per-step outcomes)."""
    torch.manual_seed(0)
    dev = lx.device()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    # the loss compiled too: a loss traced lazily is work the capture does not take
    forward = torch.compile(lambda x, y: torch.nn.functional.mse_loss(model(x), y), backend="lazyxla")
    step = torch.compile(opt.step, backend="lazyxla")
    gen = torch.Generator().manual_seed(1)
    losses, counts, donated, outcomes = [], [], [], []
    try:
        with config.override(step_capture=capture):
            for i in range(STEPS):
                x = torch.randn(batch_of(i), 8, generator=gen).to(dev)
                y = torch.randn(batch_of(i), 4, generator=gen).to(dev)
                metrics.clear_all()
                opt.zero_grad()
                loss = forward(x, y)
                loss.backward()
                if mid_step is not None:
                    mid_step(loss)
                step()
                lx.sync()
                counts.append(_counts())
                donated.append(_donated())
                outcomes.append(lx.debug.step_capture())
                losses.append(loss.cpu().item())
            params = [p.cpu() for p in model.parameters()]
    finally:
        torch._dynamo.reset()
    return losses, params, counts, donated, outcomes


def test_steady_compiled_step_is_one_call_without_walk_or_plan():
    losses, params, counts, donated, outcomes = _train(capture=True)
    ref_losses, ref_params, ref_counts, ref_donated, _ = _train(capture=False)
    assert losses == ref_losses
    assert all(torch.equal(p, r) for p, r in zip(params, ref_params))
    assert [o.outcome for o in outcomes[1:]] == ["recorded"] + ["replayed"] * (STEPS - 2)
    for c in counts[2:]:
        assert c == {"ExecuteComputation": 1, "GraphCollect": 0, "DonorPlan": 0, "StepCaptureReplay": 1,
                     "UncachedCompile": 0}, c
    assert all(c["StepCaptureReplay"] == 0 and c["DonorPlan"] >= 1 for c in ref_counts)
    assert donated[2:] == ref_donated[2:]
    assert all(d and d[-1] > 0 for d in donated[2:])   # parameters and Adam's state, in place
    report = lx.debug.donation_report()
    assert report is not None and sum(p["donated"] for p in report.params) > 0


def test_read_in_the_middle_of_the_step_falls_back_and_says_so():
    reads = lambda loss: loss.item()   # noqa: E731
    losses, params, counts, _, outcomes = _train(capture=True, mid_step=reads)
    ref_losses, ref_params, _, _, _ = _train(capture=False, mid_step=reads)
    assert losses == ref_losses
    assert all(torch.equal(p, r) for p, r in zip(params, ref_params))
    assert all(c["StepCaptureReplay"] == 0 for c in counts)
    assert outcomes[-1].outcome == "not captured"
    assert "host read" in outcomes[-1].reason


def test_small_lazily_traced_work_is_captured_and_more_falls_back():
    """A few ops traced lazily in the step (a running loss total, with a lifted scalar whose
    value changes every step) are part of the capture; more than the bound falls back."""
    total = []
    small = lambda loss: total.append(loss.detach() * (len(total) + 2))   # noqa: E731
    losses, _, counts, _, outcomes = _train(capture=True, mid_step=small)
    sums = [t.cpu().item() for t in total]
    total.clear()
    ref_losses, _, _, _, _ = _train(capture=False, mid_step=small)
    assert losses == ref_losses
    assert sums == [t.cpu().item() for t in total]
    assert [c["StepCaptureReplay"] for c in counts[2:]] == [1] * (STEPS - 2)

    def large(loss) -> None:
        t = loss.detach()
        for _ in range(step_capture._MAX_TRACED + 1):
            t = t.sin()
        total.append(t)
    losses, _, counts, _, outcomes = _train(capture=True, mid_step=large)
    assert losses == ref_losses
    assert all(c["StepCaptureReplay"] == 0 for c in counts)
    assert "lazily traced work" in outcomes[-1].reason


def test_new_shape_records_again():
    batch_of = lambda i: 4 if i < 3 else 6   # noqa: E731
    losses, params, _, _, outcomes = _train(capture=True, batch_of=batch_of)
    ref_losses, ref_params, _, _, _ = _train(capture=False, batch_of=batch_of)
    assert losses == ref_losses
    assert all(torch.equal(p, r) for p, r in zip(params, ref_params))
    assert [o.outcome for o in outcomes[1:]] == ["recorded", "replayed", "recorded", "replayed"]


def test_explicitly_donated_input_raises_after_a_captured_step():
    torch.manual_seed(0)
    dev = lx.device()
    w = torch.nn.Parameter(torch.randn(4, 4).to(dev))
    opt = torch.optim.SGD([w], lr=0.1)
    step = torch.compile(opt.step, backend="lazyxla")
    f = torch.compile(lambda a, b: (a @ b).sum(), backend="lazyxla")
    outcomes = []
    try:
        for _ in range(4):
            x = torch.randn(4, 4).to(dev)
            lx.set_buffer_donation(x, True)
            opt.zero_grad()
            f(w, x).backward()
            step()
            lx.sync()
            outcomes.append(lx.debug.step_capture().outcome)
            with pytest.raises(lx.DonatedBufferError, match="donated"):
                x.cpu()
    finally:
        torch._dynamo.reset()
    assert outcomes[-1] == "replayed", outcomes


@pytest.mark.parametrize("platform", ["cpu", "tpu"])
@pytest.mark.parametrize("whole_step", [False, True], ids=["compiled-forward", "compiled-step"])
def test_decode_loop_token_is_one_captured_call(whole_step, platform):
    """The decode loop form (lazyxla/bench/decode_loop.py: a static cache, `lx.sync()` after
    each token): after the first call, every token is one call of the captured step, no graph
    walk, no donor plan, every layer's K and V donated each decode token; tokens equal the
    uncaptured loop's and eager generate()'s; also under the TPU backend's policies (lifted
    scalars packed) over JAX's CPU."""
    pytest.importorskip("transformers")
    with backend_as(platform):
        _decode_loop(whole_step)


def _decode_loop(whole_step: bool) -> None:
    from lazyxla.bench import decode_loop, gen_models
    tokens = 6
    model = gen_models.build_model("llama", torch.float32)
    ids = gen_models.prompt(model, 2, 8)
    ref, _ = gen_models.timed_generate(model, ids, tokens, "static")
    dev = lx.device()
    model.to(dev)
    compiled = lambda f: torch.compile(f, backend="lazyxla")   # noqa: E731
    loop = decode_loop.TorchDecodeLoop(model, dev, barrier=lx.sync, wait=lx.wait_device_ops,
                                       forward=None if whole_step else compiled(model.forward),
                                       compile_step=compiled if whole_step else None)
    try:
        with config.override(step_capture=False):
            assert torch.equal(loop.run(ids, tokens).ids, ref)
        loop.run(ids, tokens)   # records the prefill's and the decode token's steps
        metrics.clear_all()
        assert torch.equal(loop.run(ids, tokens).ids, ref)
        counts = _counts()
        kv = [d for d in _donated() if d > 0]
    finally:
        torch._dynamo.reset()
        model.to("cpu")
    # one captured call a token; the one graph walked and planned is the loop's final read
    # of the tokens (a host read, not a step)
    assert counts == {"ExecuteComputation": tokens + 1, "GraphCollect": 1, "DonorPlan": 1,
                      "StepCaptureReplay": tokens, "UncachedCompile": 0}, counts
    layers = model.config.num_hidden_layers
    kv_bytes = 2 * layers * 2 * model.config.num_key_value_heads * (8 + tokens) * \
        (model.config.hidden_size // model.config.num_attention_heads) * 4
    assert sum(d >= kv_bytes for d in kv) == tokens - 1, kv   # the prefill's cache is new


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_captured_step_under_the_tpu_storage_policy(dtype):
    """Under the TPU backend's default storage dtype policy (64-bit types held in 32 bits,
    lifted scalars travelling in 32 bits; runtime/backend/accelerators.py), over JAX's CPU:
    the step replays as one call, losses and parameters equal the uncaptured step's, and a
    step under another policy is another program (the fingerprint holds the policy's token)."""
    torch.set_default_dtype(dtype)
    try:
        with backend_as("tpu"):
            assert lx.storage_dtypes() is not None
            losses, params, counts, donated, outcomes = _train(capture=True)
            ref_losses, ref_params, _, ref_donated, _ = _train(capture=False)
            switched = []
            policy = lambda i: None if i == 3 else lx.storage_dtypes()   # noqa: E731

            def set_policy(loss) -> None:
                lx.set_storage_dtypes(policy(len(switched)))
                switched.append(lx.storage_dtypes())
            saved = lx.storage_dtypes()
            try:
                policy_losses, _, _, _, policy_outcomes = _train(capture=True, mid_step=set_policy)
                switched.clear()
                lx.set_storage_dtypes(saved)
                ref_policy_losses, _, _, _, _ = _train(capture=False, mid_step=set_policy)
            finally:
                lx.set_storage_dtypes(saved)
    finally:
        torch.set_default_dtype(torch.float32)
    assert losses == ref_losses
    assert all(torch.equal(p, r) for p, r in zip(params, ref_params))
    assert all(p.dtype == dtype for p in params)
    assert [o.outcome for o in outcomes[1:]] == ["recorded"] + ["replayed"] * (STEPS - 2)
    assert [c["StepCaptureReplay"] for c in counts[2:]] == [1] * (STEPS - 2)
    assert donated[2:] == ref_donated[2:]
    # step 3 under no policy: recorded as a program of its own; step 4 under the TPU's again,
    # replayed, unless step 3 left its float64 buffers stored as float64: another program
    assert [o.outcome for o in policy_outcomes[1:]] == \
        ["recorded", "replayed", "recorded", "replayed" if dtype == torch.float32 else "recorded"]
    assert policy_losses == ref_policy_losses


def test_entry_values_compose_with_the_captured_step(host_replay):
    """A step that starts a running total afresh (`torch.zeros` then `+=`, as the Trainer's
    `tr_loss -= tr_loss` reset does) has its entry value computed on the host and read as
    staged device data (sync/entries.py): the step still replays, with this step's staged
    buffer, and the totals equal the uncaptured step's."""
    totals: list = []

    def running_total(loss) -> None:
        t = torch.zeros((), device=loss.device)
        t += loss.detach()
        totals.append(t)
    losses, _, counts, _, outcomes = _train(capture=True, mid_step=running_total)
    entry_values = metrics.counter_value("HostEntryValue") or 0
    got = [t.cpu().item() for t in totals]
    totals.clear()
    ref_losses, _, _, _, _ = _train(capture=False, mid_step=running_total)
    assert losses == ref_losses and got == [t.cpu().item() for t in totals] == losses
    assert entry_values >= 1   # the last step's, counted since its metrics.clear_all()
    assert [o.outcome for o in outcomes[1:]] == ["recorded"] + ["replayed"] * (STEPS - 2)
    assert [c["StepCaptureReplay"] for c in counts[2:]] == [1] * (STEPS - 2)


def _read_ended_tokens(capture: bool, tokens: int = 5) -> tuple:
    """A decode-like loop whose tokens end in a host read, as generate()'s stopping check: a
    compiled call, the argmax on the device, the ids growing on the host, `(ids == 7).any()`
    read; each token's input explicitly donated. (ids, per-token counters, outcomes, donated
    bytes, whether reading each donated input raised)."""
    dev = lx.device()
    torch.manual_seed(0)
    w = torch.randn(8, 8).to(dev)
    f = torch.compile(lambda w, x: torch.tanh(x @ w), backend="lazyxla")
    gen = torch.Generator().manual_seed(2)
    ids = torch.zeros(2, 1, dtype=torch.long).to(dev)
    counts, outcomes, donated, raised = [], [], [], []
    lx.set_explicit_donation(True)
    try:
        with config.override(step_capture=capture):
            for _ in range(tokens):
                x = torch.randn(2, 8, generator=gen).to(dev)
                lx.set_buffer_donation(x, True)
                metrics.clear_all()
                h = f(w, x)
                ids = torch.cat([ids, h.argmax(-1, keepdim=True)], dim=1)
                bool((ids == 7).any())
                counts.append(_counts())
                outcomes.append(lx.debug.step_capture())
                donated.append(_donated())
                with pytest.raises(lx.DonatedBufferError, match="donated"):
                    x.cpu()
                raised.append(True)
            return ids.cpu(), counts, outcomes, donated, raised
    finally:
        torch._dynamo.reset()


def test_read_ending_a_token_replays_and_a_donated_buffer_still_raises(host_replay):
    """sync/read_capture.py: from the third token, the read that ends it is one call of the
    executable recorded for it (its bookkeeping replayed on the host), with no graph walk and
    no donor plan; ids equal the uncaptured loop's and eager's, donated bytes are unchanged, a
    donated input still raises DonatedBufferError. With the capture off, no replay."""
    ids, counts, outcomes, donated, raised = _read_ended_tokens(capture=True)
    ref_ids, ref_counts, ref_outcomes, ref_donated, _ = _read_ended_tokens(capture=False)
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    gen = torch.Generator().manual_seed(2)
    eager = torch.cat([torch.zeros(2, 1, dtype=torch.long)] +
                      [torch.tanh(torch.randn(2, 8, generator=gen) @ w).argmax(-1, keepdim=True) for _ in range(5)], 1)
    assert torch.equal(ids, ref_ids) and torch.equal(ids, eager)
    assert [o.outcome for o in outcomes[2:]] == ["replayed"] * 3, outcomes
    for c in counts[2:]:
        assert c == {"ExecuteComputation": 1, "GraphCollect": 0, "DonorPlan": 0, "StepCaptureReplay": 1,
                     "UncachedCompile": 0}, c
    assert donated == ref_donated and all(d and d[-1] > 0 for d in donated)
    assert len(raised) == 5
    assert all(c["StepCaptureReplay"] == 0 and c["DonorPlan"] == 1 for c in ref_counts)
    assert ref_outcomes[-1] == ("not captured", "off (LAZYXLA_STEP_CAPTURE=0)")


def test_read_capture_falls_back_and_says_why(host_replay):
    """A read with no bookkeeping split (bookkeeping off, or a float read such as a loss), no
    compiled call since the last read (lazy mode), or more nodes than the read's pass takes: the
    ordinary read runs, and lx.debug.step_capture() says why."""
    with config.override(host_bookkeeping_max_elements=0):
        ids, counts, outcomes, _, _ = _read_ended_tokens(capture=True, tokens=3)
    assert all(c["StepCaptureReplay"] == 0 for c in counts)
    assert "no bookkeeping split" in outcomes[-1].reason
    dev = lx.device()
    loss = torch.compile(lambda a: (a * 2).sum(), backend="lazyxla")
    a = torch.randn(4).to(dev)
    try:
        for _ in range(2):   # the second read's fingerprint is known to have nothing to split
            assert loss(a).item() == pytest.approx((a.cpu() * 2).sum().item())
            assert lx.debug.step_capture() == ("not captured", "host read: no bookkeeping to split")
    finally:
        torch._dynamo.reset()
    t = torch.randn(4).to(dev)
    for _ in range(read_capture._MAX_NODES + 1):
        t = t + 1
    bool((t.argmax() == 0).any())   # traced lazily: nothing compiled to capture
    assert lx.debug.step_capture() == ("not captured", "host read: no compiled call since the last read (lazy mode)")
    double = torch.compile(lambda a: a * 2, backend="lazyxla")
    try:
        t = double(torch.randn(4).to(dev))
        for _ in range(read_capture._MAX_NODES + 1):
            t = t + 1
        bool((t.argmax() == 0).any())
    finally:
        torch._dynamo.reset()
    assert lx.debug.step_capture() == \
        ("not captured", f"more than {read_capture._MAX_NODES} nodes of lazily traced work in the read")


def test_whole_step_under_compiled_autograd_is_one_captured_call():
    """The whole training step in one compiled function, its backward traced by torch's
    compiled autograd (issue 51's form "backward inside"): losses and parameters equal
    eager CPU's, and from the third step each step is one executable call with no graph
    walk, no donor plan and no dynamo recompile, donating the parameters and Adam's state."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to(lx.device())
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, foreach=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)

    def train_step(net, optimizer, x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    compiled = torch.compile(train_step, backend="lazyxla")
    gen = torch.Generator().manual_seed(1)
    counts, donated = [], []
    try:
        with torch._dynamo.config.patch(compiled_autograd=True):
            for _ in range(STEPS):
                x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 4, generator=gen)
                expected = train_step(ref, ref_opt, x, y)
                metrics.clear_all()
                loss = compiled(model, opt, x.to(lx.device()), y.to(lx.device()))
                lx.sync()
                counts.append(dict(_counts(), DynamoCompile=metrics.counter_value("DynamoCompile") or 0))
                donated.append(_donated())
                assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    finally:
        torch._dynamo.reset()
    for p, r in zip(model.parameters(), ref.parameters()):
        assert_close(p.detach(), r.detach(), rtol=1e-5, atol=1e-6)
    for c in counts[2:]:
        assert c == {"ExecuteComputation": 1, "GraphCollect": 0, "DonorPlan": 0, "StepCaptureReplay": 1,
                     "UncachedCompile": 0, "DynamoCompile": 0}, counts
    assert all(d and d[-1] > 0 for d in donated[2:]), donated
