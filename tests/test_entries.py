"""Entry values (lazyxla/sync/entries.py): small pending state that a step barrier reads as
device data computed on the host, so a loop's first step and the step after a reset run
the later steps' graph. Compiles counted per step, values against eager CPU."""
import copy

import pytest
import torch

import lazyxla as lx
from helpers import assert_close
from lazyxla import metrics
from lazyxla.compile.cache import clear_cache


@pytest.fixture(autouse=True)
def _empty_compile_cache():
    """Each test counts its own compiles, not hits on an earlier test's graphs."""
    clear_cache()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _compiles() -> int:
    return metrics.counter_value("UncachedCompile") or 0


OPTIMIZERS = {   # lazy, eager: the same update (eager CPU has no capturable AdamW)
    "fused": ({"fused": True}, {"fused": True}),
    "capturable_foreach": ({"capturable": True, "foreach": True}, {"foreach": True}),
    "capturable_loop": ({"capturable": True, "foreach": False}, {"foreach": False}),
    "default": ({}, {}),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fresh_optimizer_state_gives_the_later_steps_graph(name, dev, host_replay):
    # AdamW(fused=True) and capturable AdamW make `step = torch.zeros(())` on the device in
    # the first step(): step 1 compiled a graph of its own and step 2 compiled the real one.
    lazy_kw, eager_kw = OPTIMIZERS[name]
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    ref = _model()
    lazy = copy.deepcopy(ref).to(dev)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, **eager_kw)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2, **lazy_kw)
    compiles, keys, donors = [], [], []
    for _ in range(4):
        for model, o, xs, ys in ((ref, ref_opt, x, y), (lazy, opt, x.to(dev), y.to(dev))):
            o.zero_grad()
            torch.nn.functional.mse_loss(model(xs), ys).backward()
            before = _compiles()
            o.step()   # the implied step barrier
        compiles.append(_compiles() - before)
        report = lx.debug.donation_report()
        keys.append(report.graph_key)
        donors.append(report.donors)
    assert compiles == [1, 0, 0, 0]
    assert len(set(keys)) == 1 and len(set(donors)) == 1 and donors[0] > 0
    for pr, pl in zip(ref.parameters(), lazy.parameters()):
        assert_close(pl.detach(), pr.detach(), rtol=1e-5, atol=1e-6)
    for pr, pl in zip(ref.parameters(), lazy.parameters()):
        state_ref, state_lazy = ref_opt.state[pr], opt.state[pl]
        assert float(state_lazy["step"].cpu()) == float(state_ref["step"]) == 4.0
        assert_close(state_lazy["exp_avg_sq"], state_ref["exp_avg_sq"], rtol=1e-5, atol=1e-8)


def _logged_loop(device, steps: int, log_every: int, read_before_reset: bool,
                 micro_batches: int = 1) -> tuple[list, list]:
    """The Trainer's pattern: a loss sum on the device, a nan check reading each micro-batch's
    loss, the sum logged and reset with `total -= total` every `log_every` steps. Returns the
    logged sums and the compiles of each step."""
    torch.manual_seed(1)
    model = _model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = [[(torch.randn(8, 6).to(device), torch.randn(8, 3).to(device)) for _ in range(micro_batches)]
            for _ in range(steps)]
    total = torch.tensor(0.0, device=device)
    logged, compiles = [], []
    for step, batches in enumerate(data, 1):
        before = _compiles()
        opt.zero_grad()
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if not bool(torch.isnan(loss)):   # a host read between the reset and the sum
                total += loss.detach()
        opt.step()
        if step % log_every == 0:
            logged.append(total.item() if read_before_reset else total.clone())
            total -= total
        compiles.append(_compiles() - before)
    return [float(v) for v in logged], compiles


def test_a_reset_the_host_read_gives_the_steps_graph(dev, host_replay):
    logged, compiles = _logged_loop(dev, 7, 3, read_before_reset=True)
    # the fresh sum of step 1 is an upload, the two resets come from the host
    assert metrics.counter_value("HostEntryValue") == 2
    expected, _ = _logged_loop("cpu", 7, 3, read_before_reset=True)
    assert logged == pytest.approx(expected, rel=1e-5)
    # step 1: the read's graph (forward) and the step's graph; the host computes each
    # reset (its value read at logging) and the step after it runs the same graph
    assert compiles == [2, 0, 0, 0, 0, 0, 0]


def test_a_reset_summed_across_reads_gives_the_steps_graph(dev, host_replay):
    # Two micro-batches a step, a read before each one's sum: after a reset the sum crosses
    # two reads before the barrier. The entry is the reset (the value at the first read the
    # chain of writes crossed), as the steady steps' sum enters as last step's buffer; the
    # value at the second read (reset plus the first loss) made the step after each log a
    # graph of its own.
    logged, compiles = _logged_loop(dev, 7, 3, read_before_reset=True, micro_batches=2)
    assert metrics.counter_value("HostEntryValue") == 2
    expected, _ = _logged_loop("cpu", 7, 3, read_before_reset=True, micro_batches=2)
    assert logged == pytest.approx(expected, rel=1e-5)
    # step 1: each micro-batch's read (the second one's graph also reads the first's
    # gradients) and the step's graph
    assert compiles == [3, 0, 0, 0, 0, 0, 0]


def test_a_reset_the_host_does_not_hold_stays_in_the_graph(dev, host_replay):
    # The host would have to wait for the device to compute `total - total`: the step after
    # a reset is a kind of step of its own, compiled once.
    logged, compiles = _logged_loop(dev, 7, 3, read_before_reset=False)
    expected, _ = _logged_loop("cpu", 7, 3, read_before_reset=False)
    assert logged == pytest.approx(expected, rel=1e-5)
    assert compiles == [2, 0, 0, 1, 0, 0, 0]


def test_a_fill_starts_the_state_afresh(dev, host_replay):
    # `torch.zeros(..., device=...)` is an allocation and a zero_(); a buffer zeroed at the
    # start of every step reads as one device-data parameter, its old buffer not at all.
    def run(device) -> tuple[list, list]:
        torch.manual_seed(2)
        xs = [torch.randn(5, 3).to(device) for _ in range(4)]
        acc = torch.zeros(3, device=device)
        counts = torch.ones((), dtype=torch.int64, device=device)
        values, compiles = [], []
        for x in xs:
            before = _compiles()
            acc.zero_()
            acc.add_(x.sum(0))
            counts.mul_(2)
            if device != "cpu":
                lx.sync()
            values.append(acc.cpu().tolist() + [float(counts.cpu())])
            compiles.append(_compiles() - before)
        return values, compiles

    values, compiles = run(dev)
    expected, _ = run("cpu")
    torch.testing.assert_close(torch.tensor(values), torch.tensor(expected))
    assert compiles == [1, 0, 0, 0]


def _fused_adamw_steps(dev, steps: int = 3) -> tuple:
    """Compiles per step of a fused AdamW loop on the device, the model and the optimizer."""
    model = _model().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    x, y = torch.randn(8, 6).to(dev), torch.randn(8, 3).to(dev)
    compiles = []
    for _ in range(steps):
        before = _compiles()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        compiles.append(_compiles() - before)
    return compiles, model, opt


def test_host_computation_off_leaves_the_state_in_the_graph(dev):
    # LAZYXLA_HOST_READ_MAX_ELEMENTS=0 (the suite's default, see conftest.py) turns host
    # computation of small values off: fused AdamW's fresh step count folds into step 1.
    compiles, _, _ = _fused_adamw_steps(dev)
    assert compiles == [1, 1, 0]


@pytest.mark.parametrize("rule", [lambda dtype: dtype, {torch.float32: torch.bfloat16}], ids=["compat", "bf16"])
def test_under_a_storage_dtype_policy_state_is_staged_as_stored(rule, dev, host_replay):
    # lazyxla.compat always sets a policy (upstream's XLA_USE_BF16 and friends; the identity
    # without them); a staged value is held in the policy's storage dtype, as the buffers
    # of the later steps are.
    previous = lx.set_storage_dtypes(rule)
    try:
        compiles, model, opt = _fused_adamw_steps(dev)
        assert compiles == [1, 0, 0]
        assert all(float(opt.state[p]["step"].cpu()) == 3.0 for p in model.parameters())
    finally:
        lx.set_storage_dtypes(previous)


def test_inspection_shows_the_graph_the_barrier_runs(dev, host_replay):
    # lx.debug.ir_text() / hlo_text() of the pending step (sync/api.py pending_graphs)
    from lazyxla.sync.api import pending_graphs
    counter = torch.zeros((), device=dev)
    keys = []
    for _ in range(2):
        counter.add_(1)
        (graph, _), = pending_graphs()
        keys.append(graph.key)
        lx.sync()
    assert keys[0] == keys[1] and len(graph.params) == 1
    assert float(counter.cpu()) == 2.0
