"""The host's work per training step, counted (never timed): W2's GPT at the CPU-proxy size
of a TPU step (d 64, 4 layers, seq 32, batch 2), lazy and compiled. A count that grows with
the step is a bug even when the values are right."""
from __future__ import annotations

import gc
import sys

import pytest
import torch
from torch.nn import functional as F

import lazyxla as lx
from lazyxla import metrics, workloads
from lazyxla.compile import cache
from lazyxla.runtime import collector

PROXY = workloads.GPTConfig(d=64, heads=4, layers=4, seq=32)


def _w2(dev, compiled: bool = False):
    torch.manual_seed(0)
    model = workloads.gpt(PROXY)
    tokens = torch.randint(0, PROXY.vocab, (2, PROXY.seq + 1), generator=torch.Generator().manual_seed(1))
    eager = (model, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    lazy = workloads.gpt(PROXY)
    lazy.load_state_dict(model.state_dict())
    lazy = lazy.to(dev)
    x, y = eager[1].to(dev), eager[2].to(dev)
    opt = torch.optim.AdamW(lazy.parameters(), lr=3e-4, foreach=True)

    def loss_of(x, y):
        logits = lazy(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    step = opt.step
    if compiled:
        loss_of = torch.compile(loss_of, backend="lazyxla")
        step = torch.compile(opt.step, backend="lazyxla")

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        loss.backward()
        step()
        return loss
    return train_step, eager


def _eager_losses(eager, steps: int) -> list:
    model, x, y = eager
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture
def fresh_collector():
    collector.release()
    yield
    collector.release()


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_a_steady_step_is_one_call_of_one_cached_executable(dev, fresh_compile_cache, compiled, monkeypatch):
    train_step, eager = _w2(dev, compiled)
    losses = [train_step() for _ in range(4)]
    calls = []
    real_call = cache.Executable.call

    def counted(*args, **kwargs):   # execute() calls exe.call once per graph it runs
        calls.append(1)
        return real_call(*args, **kwargs)
    for exe in list(cache._cache.values()):
        exe.call = lambda *a, _c=exe.compiled: (calls.append(1), _c(*a))[1]
    per_step = []
    for _ in range(6):
        metrics.clear_all()
        calls.clear()
        losses.append(train_step())
        per_step.append((metrics.counter_value("ExecuteComputation"), len(calls),
                         metrics.counter_value("UncachedCompile") or 0, metrics.counter_value("DynamoCompile") or 0,
                         metrics.counter_value("TracedOps")))
    assert len(set(per_step)) == 1, per_step          # nothing grows with the step
    graphs, exe_calls, compiles, dynamo, traced = per_step[0]
    assert (graphs, exe_calls, compiles, dynamo) == (1, 1, 0, 0)
    assert traced <= (60 if compiled else 700)
    expected = _eager_losses(eager, len(losses))
    assert [round(l.item(), 4) for l in losses] == pytest.approx([round(v, 4) for v in expected], abs=2e-4)


def test_a_steady_lazy_barrier_reuses_its_plans(dev, fresh_compile_cache, fresh_collector):
    """Lazy mode's barrier (issue 50; docs/design.md "Lazy mode's per-op path and overlap"): a
    steady W2 step's graph is walked once (`GraphCollect`), its donor plan is the last step's
    (`DonorPlanReused`: same graph key, same per-parameter facts; the same decisions), and
    its outputs are installed from its executable's outputs plan, made once at the compile
    (`OutputPlanBuilt`); AdamW's foreach calls replay their plans (`ForeachPlanReused`).
    The traced ops, the donors and the values stay as they were; the
    collector collects at most once a step, and an `lx.sync()` with nothing pending adds none."""
    from lazyxla.sync.pipeline import LastGraph
    train_step, eager = _w2(dev)
    metrics.clear_all()
    losses = [train_step() for _ in range(4)]
    compiles = metrics.counter_value("UncachedCompile")
    assert metrics.counter_value("OutputPlanBuilt") == compiles   # one plan per executable
    per_step, decisions, collections = [], [], []
    for _ in range(5):
        metrics.clear_all()
        losses.append(train_step())
        lx.sync()   # nothing pending (the bench's loop): no graph, no plan
        report = lx.debug.donation_report()
        per_step.append(tuple(metrics.counter_value(name) or 0 for name in
                              ("TracedOps", "GraphCollect", "DonorPlan", "DonorPlanReused", "OutputPlanBuilt",
                               "UncachedCompile", "ExecuteComputation", "ForeachPlanReused", "ForeachPlanBuilt"))
                        + (report.donors, len(report.params)))
        decisions.append(LastGraph.decisions)
        collections.append(metrics.counter_value("GcCollections") or 0)
    assert len(set(per_step)) == 1, per_step
    # 605 traced ops; one walk, one plan (the last one's), no new outputs plan, no compile;
    # AdamW's 8 foreach calls replay their plans (frontend/foreach_plans.py), none is made;
    # of 163 parameters, the 53 weights and Adam's two moments of each donated, the two token
    # batches and the model's position and mask buffers kept
    assert per_step[0] == (605, 1, 1, 1, 0, 0, 1, 8, 0, 159, 163)
    assert all(d is decisions[0] for d in decisions)
    if collector.is_managed():
        assert max(collections) <= 1
    expected = _eager_losses(eager, len(losses))
    assert [round(l.item(), 4) for l in losses] == pytest.approx([round(v, 4) for v in expected], abs=2e-4)


def test_no_older_collection_in_50_steady_steps(dev, fresh_collector):
    if not gc.isenabled():
        pytest.skip("the collector is disabled in this process")
    train_step, _ = _w2(dev)
    for _ in range(collector.CollectorPolicy().warmup_barriers + 2):
        train_step()
    assert collector.is_managed()
    generations = []

    def record(phase, info):
        if phase == "start":
            generations.append(info["generation"])
    gc.callbacks.append(record)
    try:
        for _ in range(50):
            train_step()
    finally:
        gc.callbacks.remove(record)
    assert not [g for g in generations if g > 0]
    assert len(generations) <= 50   # at most the barrier's own generation-0 collection a step


def test_a_steady_compiled_step_is_per_buffer_work(dev, fresh_compile_cache):
    """Compiled mode's own host work per step (issue #44 item 6; docs/benchmarks.md, "Compiled
    mode's host cost per step"): three replays, AccumulateGrad's 53 detaches and backward's
    ones_like traced lazily, one implied barrier whose graph is the three CALL nodes, one
    GETITEM per output they produce, the device-data leaves and the ones_like (599 nodes),
    with every buffer the step updates donated and every value as eager's; the barrier replays
    as the captured step."""
    train_step, eager = _w2(dev, compiled=True)
    losses = [train_step() for _ in range(3)]
    per_step = []
    for _ in range(4):
        metrics.clear_all()
        losses.append(train_step())
        report = lx.debug.donation_report()
        per_step.append((metrics.counter_value("TracedOps"), metrics.counter_value("ExecuteComputation"),
                         metrics.counter_value("ImpliedBarrier"), metrics.counter_value("CompiledGraphCaptures") or 0,
                         metrics.counter_value("UncachedCompile") or 0, report.n_nodes, report.donors,
                         len(report.params), metrics.counter_value("StepCaptureReplay") or 0,
                         metrics.counter_value("GraphCollect") or 0, metrics.counter_value("DonorPlan") or 0))
    assert len(set(per_step)) == 1, per_step
    traced, calls, barriers, captures, compiles, nodes, donors, params, replayed, walks, plans = per_step[0]
    assert traced <= 54                      # 53 detaches (one per parameter) + ones_like
    assert (calls, barriers, captures, compiles) == (1, 1, 0, 0)
    # the barrier is the captured step (sync/step_capture.py): no graph walk, no donor plan
    assert (replayed, walks, plans) == (1, 0, 0)
    assert nodes <= 599
    # 53 parameters, Adam's two moments and step counter per parameter: all updated in place
    # and donated; the two others are the token batches, read again next step
    assert (donors, params) == (212, 216)
    expected = _eager_losses(eager, len(losses))
    assert [round(l.item(), 4) for l in losses] == pytest.approx([round(v, 4) for v in expected], abs=2e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_steps_without_reads_never_wait_for_the_device(dev, compiled):
    """Overlap (issue 50): in a loop of steps that read nothing, no sync waits for the
    device work of the step before (counter `DeviceWait`: every host wait for device
    results), so the host traces step k+1 while the device runs step k. Pinned per step:
    the traced ops, one graph, no host read. A read waits once, and the values are eager's."""
    train_step, eager = _w2(dev, compiled)
    losses = [train_step().detach() for _ in range(3)]
    lx.sync()
    lx.wait_device_ops()
    per_step = []
    for _ in range(5):
        metrics.clear_all()
        losses.append(train_step().detach())
        lx.sync()
        per_step.append((metrics.counter_value("TracedOps"), metrics.counter_value("ExecuteComputation"),
                         metrics.counter_value("MarkStep"), metrics.counter_value("DeviceWait"),
                         metrics.metric_data("TransferFromDeviceTime")))
    assert per_step == [(TRACED_PER_STEP[compiled], 1, 1, None, None)] * 5
    metrics.clear_all()
    last = losses[-1].item()    # a host read: the one wait
    assert (metrics.counter_value("DeviceWait"), metrics.metric_data("TransferFromDeviceTime")[0]) == (1, 1)
    expected = _eager_losses(eager, len(losses))
    assert last == pytest.approx(expected[-1], abs=2e-4)
    assert [round(l.item(), 4) for l in losses] == pytest.approx([round(v, 4) for v in expected], abs=2e-4)


# traced ops of one W2 proxy step (forward, backward, foreach AdamW) and the loss's detach:
# lazy mode traces every op; compiled mode AccumulateGrad's 53 detaches, backward's ones_like
# and the detach
TRACED_PER_STEP = {False: 606, True: 55}


def _lazyxla_frames(fn) -> list:
    """Names of lazyxla's Python functions that one call of `fn` runs, after two calls that
    fill the caches (shape inference, a foreach plan is made at its second call)."""
    fn()
    fn()
    names = []

    def profile(frame, event, arg):
        if event == "call" and "lazyxla" in frame.f_code.co_filename:
            names.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


@pytest.mark.parametrize("op, most", [
    ("add", 10),       # dispatch, functional, convert_call, 2 operands, the node (2), wrap_outputs, Storage, wrap
    ("clone", 9),
    ("add_", 9),       # ... the node written into self (LazyTensor.write, Storage.write)
    ("view", 9),       # dispatch, view, positional (2: the size is a list), the operand, the node (2),
    ("t", 8),          # wrap, copy_bits
    ("foreach", 14 + 5 * 4),   # the call's signature and plan, then per element: operand, node (2), write (2)
])
def test_a_traced_op_runs_few_python_frames(dev, op, most):
    """Python frames are most of a traced op's cost: the dispatcher is `__torch_dispatch__`
    itself, and the hot handlers call as few functions as they can (issue 50)."""
    x, y = torch.randn(4, 8, device=dev), torch.randn(4, 8, device=dev)
    ps = [torch.randn(3, device=dev) for _ in range(4)]
    calls = {"add": lambda: x + y, "clone": lambda: x.clone(), "add_": lambda: x.add_(y),
             "view": lambda: x.view(8, 4), "t": lambda: x.t(), "foreach": lambda: torch._foreach_mul_(ps, 0.5)}
    names = _lazyxla_frames(calls[op])
    assert names[0] == "dispatch", names   # torch calls the dispatcher directly
    assert len(names) <= most, names
