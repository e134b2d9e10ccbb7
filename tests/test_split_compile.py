"""A large graph compiled as several programs at once (compile/split.py): the same values
as eager and as one program, one compile per kind of step, donation kept, the cut where the
fewest values cross it, a large half cut again, and only where the backend (the TPU) or the
user asks for it."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

import lazyxla as lx
from lazyxla import config
from lazyxla.compile import cache, split
from lazyxla.runtime import backend

from helpers import assert_close, backend_as, counter


def _train(dev, steps: int = 4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16).to(dev), torch.randint(0, 4, (8,)).to(dev)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in losses], [p.detach().cpu() for p in model.parameters()], \
        [v.cpu() for state in opt.state.values() for v in state.values()]


def test_a_step_in_two_halves_trains_as_eager_and_compiles_once(dev):
    eager = _train("cpu")
    cache.clear_cache()
    with config.override(split_compile_min_equations=20):
        lazy = _train(dev)
    assert counter("SplitCompile") == 1 and counter("UncachedCompile") == 1   # one kind of step
    assert counter("ExecuteComputation") == 4
    assert_close(torch.tensor(lazy[0]), torch.tensor(eager[0]), rtol=1e-6, atol=1e-6)
    for got, expected in zip(lazy[1] + lazy[2], eager[1] + eager[2]):
        assert_close(got, expected, rtol=1e-5, atol=1e-6)
    exe, = [e for e in cache._cache.values() if isinstance(e.compiled, split.Halves)]
    # the parameters and AdamW's state are donated to the half that reads them last and
    # their buffers reused for the new values
    assert len(exe.donors) == 18 and exe.compiled.handed > 0
    # every donated buffer is reused as in the whole program: an updated parameter made in
    # the first half is that half's output (aliased to its input), not copied through the second
    cache.clear_cache()
    _train(dev, steps=1)
    whole, = [e for e in cache._cache.values() if len(e.donors) == 18]
    assert not isinstance(whole.compiled, split.Halves)
    assert exe.memory_analysis()["alias_size_in_bytes"] == whole.memory_analysis()["alias_size_in_bytes"] > 0


def test_a_donated_buffer_read_after_a_split_step_still_raises(dev):
    with config.override(split_compile_min_equations=5):
        w = torch.ones(64).to(dev)
        alias = w.detach()
        lx.set_buffer_donation(w, True)
        lx.set_explicit_donation(True)
        w.mul_(2).add_(1).sin_()
        lx.sync()
        assert counter("SplitCompile") == 1
        torch.testing.assert_close(w.cpu(), (torch.ones(64) * 2 + 1).sin())
        torch.testing.assert_close(alias.cpu(), w.cpu())   # a view of the storage reads the new value


def test_only_large_graphs_split_and_only_where_asked(dev):
    assert backend.CpuBackend.split_compile_min_equations == 0   # CPU: a compile takes seconds
    with backend_as("tpu"):
        assert backend.setting("split_compile_min_equations") == 3000
    with config.override(split_compile_min_equations=100_000):
        _train(dev, steps=1)
    assert counter("SplitCompile") == 0


def _run(jaxpr, consts, *args):
    from jax.extend import core
    return core.jaxpr_as_fun(core.ClosedJaxpr(jaxpr, consts))(*args)


def _chain_jaxpr():
    def f(x, y):
        a = jnp.sin(x)
        b = jnp.cos(a) * y       # a and y cross the cut anywhere before this
        c = jnp.exp(b)
        d = c + 1.0
        e = d * 2.0
        return e + a.sum(), jnp.tanh(d)
    return jax.make_jaxpr(f)(jnp.ones(4), jnp.ones(4))


def _run_cut(cut, consts, args: dict) -> list:
    """The program's outputs from its two halves run one after the other (`Halves`)."""
    made_first = _run(cut.first, consts, *[args[v] for v in cut.first_in])
    made_second = _run(cut.second, [], *[args[v] for v in cut.second_in], *made_first[:len(cut.handed)])
    return [(made_first, made_second)[half][i] for half, i in cut.outputs]


def test_the_cut_is_where_the_fewest_values_cross():
    closed = _chain_jaxpr()
    k = split.cut_point(closed.jaxpr)
    cut = split._halves(closed, k)
    assert len(cut.first.eqns) + len(cut.second.eqns) == len(closed.jaxpr.eqns)
    # any cut of this program hands over at least two values (the running value and `a`)
    assert len(cut.handed) == 2
    x, y = jnp.arange(4.0), jnp.full(4, 0.5)
    got = _run_cut(cut, closed.consts, dict(zip(closed.jaxpr.invars, (x, y))))
    for a, b in zip(got, _run(closed.jaxpr, closed.consts, x, y)):
        assert jnp.allclose(a, b)


def test_an_output_the_first_half_makes_is_its_own_result_not_handed_through():
    def f(x, w):
        w_new = w - 0.1 * jnp.sin(x)     # an updated "parameter": made early, an output
        h = jnp.cos(x) * 2.0
        return jnp.exp(h) + 1.0, w_new

    closed = jax.make_jaxpr(f)(jnp.ones(4), jnp.ones(4))
    cut = split._halves(closed, 3)
    assert cut.outputs[1][0] == 0                      # w_new comes from the first half
    assert not any(v in cut.second.outvars for v in cut.first.outvars[len(cut.handed):])
    x, w = jnp.arange(4.0), jnp.full(4, 2.0)
    for a, b in zip(_run_cut(cut, closed.consts, dict(zip(closed.jaxpr.invars, (x, w)))), f(x, w)):
        assert jnp.allclose(a, b)


def test_a_constant_read_after_the_cut_is_handed_over():
    table = jnp.arange(8.0)   # closed over: a constant of the jaxpr

    def f(x):
        h = jnp.sin(x) * 2.0
        h = jnp.cos(h) + 1.0
        return h * table

    closed = jax.make_jaxpr(f)(jnp.ones(8))
    assert closed.jaxpr.constvars
    cut = split._halves(closed, 1)
    got, = _run_cut(cut, closed.consts, {v: jnp.ones(8) for v in closed.jaxpr.invars})
    assert jnp.allclose(got, f(jnp.ones(8)))


@pytest.mark.parametrize("donate", [True, False])
def test_halves_compile_and_run_as_the_program(donate):
    def program(x, y):
        a = jnp.sin(x) @ y
        b = jnp.tanh(a) * 3.0
        return b + 1.0, a.sum()

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    avals = [jax.ShapeDtypeStruct((4, 4), jnp.float32, sharding=sharding)] * 2
    halves = split.lower_in_pieces(jax.make_jaxpr(program)(*avals), avals, (0, 1) if donate else ()).compile()
    x, y = jnp.eye(4) * 0.5, jnp.ones((4, 4))
    expected = program(x, y)
    got = halves(jnp.array(x), jnp.array(y))
    for a, b in zip(got, expected):
        assert jnp.allclose(a, b, atol=1e-6)
    assert halves.memory_analysis() is not None


def test_a_large_half_is_cut_again_and_the_pieces_run_as_the_program():
    def program(x, y, z):
        for _ in range(6):
            x = jnp.sin(x) * y + z
            y = jnp.cos(y) - x
        return x + y, (x * z).sum()

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    avals = [jax.ShapeDtypeStruct((8,), jnp.float32, sharding=sharding)] * 3
    closed = jax.make_jaxpr(program)(*avals)
    n = len(closed.jaxpr.eqns)
    assert n >= 30
    once = split.lower_in_pieces(closed, avals, (0, 1))
    assert len(once.pieces()) == 2
    # a piece with n // 4 equations or more is cut again: both halves (40-60% of n) are
    pieces = split.lower_in_pieces(closed, avals, (0, 1), min_equations=n // 4)
    assert isinstance(pieces.first, split.Lowered) and isinstance(pieces.second, split.Lowered)
    assert len(pieces.pieces()) >= 4
    x, y, z = jnp.linspace(0, 1, 8), jnp.full(8, 0.5), jnp.arange(8.0)
    expected = program(x, y, z)
    got = pieces.compile()(jnp.array(x), jnp.array(y), z)   # x and y donated
    for a, b in zip(got, expected):
        assert jnp.allclose(a, b, atol=1e-6)
    assert pieces.compile().memory_analysis() is not None


def test_the_tpu_backend_splits_a_deep_model_step_and_trains_as_one_program(dev):
    # W2's GPT at 8 small layers: over the TPU's 3,000 equations a step (4 layers: 2,478)
    from lazyxla import workloads
    cfg = workloads.GPTConfig(vocab=128, d=32, heads=2, layers=8, seq=16)

    def losses():
        model, x, y, opt, loss_of = workloads.gpt_training(cfg, 2, dev)
        out = []
        for _ in range(3):
            opt.zero_grad()
            loss = loss_of(x, y)
            loss.backward()
            opt.step()
            out.append(loss.detach())
        return [float(v) for v in out]

    # the split first: on the chip the whole step's graph has the same key, and a compiled
    # executable in the cache would be reused instead
    with backend_as("tpu"):
        halves = losses()
    assert counter("SplitCompile") == 1
    with config.override(split_compile_min_equations=100_000):   # one program, on any platform
        whole = losses()
    assert counter("SplitCompile") == 1
    torch.testing.assert_close(halves, whole, rtol=2e-5, atol=2e-6)
