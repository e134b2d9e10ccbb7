"""JAX inside PyTorch (README.md, "JAX inside PyTorch"): lx.call_jax against the same computation in
eager torch, values and gradients; one graph for torch ops and the JAX function; caching;
lx.to_jax / lx.from_jax without copies; donation of shared buffers."""
from __future__ import annotations

import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import lazyxla as lx
from helpers import assert_close, counter, matmul_tolerance, run_on_host_devices


def _mlp(x, params, *, scale):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"out": h * scale, "norm": jnp.sum(h * h)}


def _mlp_torch(x, w, b, scale):
    h = torch.tanh(x @ w + b)
    return h * scale, (h * h).sum()


def test_values_and_gradients_match_torch_over_pytrees(dev, checked_ir):
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 4), torch.randn(4, 3), torch.randn(3)
    ref_leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    out_ref, norm_ref = _mlp_torch(*ref_leaves, 2.5)
    (out_ref.sum() + norm_ref).backward()

    xl, wl, bl = (t.to(dev).requires_grad_() for t in (x, w, b))
    res = lx.call_jax(_mlp, xl * 1.0, {"w": wl, "b": bl}, scale=2.5)
    assert set(res) == {"out", "norm"} and res["norm"].shape == ()
    (res["out"].sum() + res["norm"]).backward()
    # the JAX body's product runs at JAX's default precision (bf16 passes on a TPU)
    for got, want in ((res["out"], out_ref.detach()), (res["norm"], norm_ref.detach())):
        torch.testing.assert_close(got.cpu(), want, **matmul_tolerance(want, rtol=1e-5, atol=1e-5))
    for lazy, ref in zip((xl, wl, bl), ref_leaves):
        torch.testing.assert_close(lazy.grad.cpu(), ref.grad, **matmul_tolerance(ref.grad, rtol=1e-4, atol=1e-5))


def test_recorded_without_sync_into_one_graph_with_the_torch_ops(dev):
    x = torch.randn(4, 4).to(dev)
    lx.metrics.clear_all()
    y = lx.call_jax(jnp.sin, torch.relu(x) * 2) + 1     # torch before and after
    assert counter("ExecuteComputation") == 0 and counter("UncachedCompile") == 0   # nothing ran
    text = lx.debug.ir_text([y])
    assert "call[sin]" in text and "relu" in text and "add" in text
    torch.testing.assert_close(y.cpu(), torch.sin(torch.relu(x.cpu()) * 2) + 1)
    assert counter("UncachedCompile") == 1 and counter("ExecuteComputation") == 1


def test_same_function_and_shapes_never_recompile_static_kwargs_do(dev):
    def scaled(x, *, k):
        return x * k

    x = torch.randn(3).to(dev)
    lx.metrics.clear_all()
    for _ in range(3):
        lx.call_jax(scaled, x, k=2.0).cpu()
    assert counter("UncachedCompile") == 1
    torch.testing.assert_close(lx.call_jax(scaled, x, k=3.0).cpu(), x.cpu() * 3)
    assert counter("UncachedCompile") == 2
    lx.call_jax(scaled, torch.randn(5).to(dev), k=2.0).cpu()     # a new shape
    assert counter("UncachedCompile") == 3


def test_training_loop_compiles_nothing_after_step_one(dev):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    ref = torch.nn.Linear(8, 8)
    ref.load_state_dict(model.state_dict())
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    xd, yd = x.to(dev), y.to(dev)
    compiles = []
    for _ in range(4):
        opt.zero_grad()
        loss = ((lx.call_jax(jax.nn.gelu, model(xd), approximate=False) - yd) ** 2).mean()
        loss.backward()
        opt.step()
        lx.sync()
        compiles.append(counter("UncachedCompile"))
        ropt.zero_grad()
        rloss = ((torch.nn.functional.gelu(ref(x)) - y) ** 2).mean()
        rloss.backward()
        ropt.step()
        torch.testing.assert_close(loss.cpu(), rloss.detach(), rtol=1e-5, atol=1e-6)
    assert compiles[1:] == [compiles[0]] * 3, compiles
    torch.testing.assert_close(model.weight.cpu(), ref.weight.detach(), rtol=1e-5, atol=1e-6)


def test_integer_outputs_and_inputs_are_not_differentiated(dev):
    def f(x, idx):
        return x[idx] * 2.0, jnp.argmax(x)

    x = torch.randn(6).to(dev).requires_grad_()
    idx = torch.tensor([1, 3]).to(dev)
    vals, arg = lx.call_jax(f, x, idx)
    assert arg.dtype == torch.int64 and not arg.requires_grad
    vals.sum().backward()
    expected = torch.zeros(6)
    expected[[1, 3]] = 2.0
    torch.testing.assert_close(x.grad.cpu(), expected)


def test_refusals_name_the_problem(dev):
    x = torch.randn(2).to(dev)
    with pytest.raises(TypeError, match="not hashable"):
        lx.call_jax(lambda a, s: a, x, {1, 2})
    with pytest.raises(TypeError, match="cpu tensor"):
        lx.call_jax(jnp.add, x, torch.ones(2))
    with pytest.raises(TypeError, match="numpy array"):
        lx.call_jax(jnp.add, x, np.ones(2))
    with pytest.raises(ValueError, match="no lazy tensor"):
        lx.call_jax(jnp.sin, 1.0)


def test_under_torch_compile_gradient_accumulation_and_scan(dev):
    x = torch.randn(4, 3)

    @torch.compile(backend="lazyxla")
    def compiled(t):
        return lx.call_jax(jnp.cos, t * 2) + t

    xl, xr = x.to(dev).requires_grad_(), x.clone().requires_grad_()
    out = compiled(xl)
    out.sum().backward()
    (torch.cos(xr * 2) + xr).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), torch.cos(x * 2) + x)
    torch.testing.assert_close(xl.grad.cpu(), xr.grad)

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    model.to(dev)
    xs, ys = torch.randn(4, 2, 3), torch.randn(4, 2, 2)

    def step(xb, yb):
        return ((lx.call_jax(jnp.tanh, model(xb)) - yb) ** 2).mean()

    loss = lx.experimental.gradient_accumulation(step, [xs.to(dev), ys.to(dev)], model)
    total = sum(((torch.tanh(ref(xs[i])) - ys[i]) ** 2).mean() / 4 for i in range(4))
    total.backward()
    assert_close(loss, total.detach(), rtol=1e-5, atol=1e-6)
    assert_close(model.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-6)

    def body(carry, xi):
        new = lx.call_jax(lambda c, v: c * jnp.cos(v), carry, xi)
        return new, new.sum()

    init = torch.ones(3)
    final, ys_scan = lx.experimental.scan(body, init.to(dev), x.to(dev))
    c, outs = init, []
    for i in range(4):
        c = c * torch.cos(x[i])
        outs.append(c.sum())
    torch.testing.assert_close(final.cpu(), c)
    torch.testing.assert_close(ys_scan.cpu(), torch.stack(outs))


def test_jax_arrays_in_the_call_are_adopted_without_copy(dev):
    bias = jnp.arange(3, dtype=jnp.float32)
    x = torch.ones(3).to(dev)
    torch.testing.assert_close(lx.call_jax(jnp.add, x, bias).cpu(), torch.tensor([1.0, 2.0, 3.0]))


# -- shared buffers ---------------------------------------------------------------------

def test_to_jax_from_jax_round_trip_shares_the_buffer(dev):
    t = torch.arange(6, dtype=torch.float32).to(dev) * 2     # pending: materialized
    a = lx.to_jax(t)
    assert isinstance(a, jax.Array) and a.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(a), np.arange(6) * 2.0)
    back = lx.from_jax(a)
    assert back.dtype == torch.float32 and back.device == t.device
    assert lx.to_jax(back).unsafe_buffer_pointer() == a.unsafe_buffer_pointer()
    assert lx.to_jax(t).unsafe_buffer_pointer() == a.unsafe_buffer_pointer()


def test_in_place_op_on_an_imported_tensor_leaves_jax_array_intact(dev):
    a = jnp.arange(4, dtype=jnp.float32)
    t = lx.from_jax(a)
    t.mul_(3).add_(1)
    lx.sync()
    torch.testing.assert_close(t.cpu(), torch.tensor([1.0, 4.0, 7.0, 10.0]))
    assert not a.is_deleted()
    np.testing.assert_allclose(np.asarray(a), [0.0, 1.0, 2.0, 3.0])


def test_exported_buffer_is_never_donated(dev):
    w = torch.randn(4).to(dev)
    a = lx.to_jax(w)
    before = np.asarray(a).copy()
    assert lx.set_buffer_donation(w) is False      # JAX holds it: marking refuses
    w.add_(1)
    lx.sync()                                      # a step barrier would donate w's old buffer
    assert not a.is_deleted()
    np.testing.assert_allclose(np.asarray(a), before)
    assert "shared with JAX (lx.to_jax)" in str(lx.debug.donation_report())


def test_donated_tensor_raises(dev):
    w = torch.randn(4).to(dev)
    assert lx.set_buffer_donation(w)
    y = w * 2
    lx.sync()
    assert lx.is_donated(w)
    with pytest.raises(lx.DonatedBufferError):
        lx.to_jax(w)
    with pytest.raises(lx.DonatedBufferError):
        lx.to_jax(w[1:])
    torch.testing.assert_close(lx.from_jax(lx.to_jax(y)).cpu(), y.cpu())


@pytest.mark.parametrize("dtype,torch_dtype", [(jnp.int32, torch.int32), (jnp.bfloat16, torch.bfloat16),
                                                (jnp.bool_, torch.bool)])
def test_dtypes_map_both_ways(dev, dtype, torch_dtype):
    a = jnp.ones((2, 2), dtype)
    t = lx.from_jax(a)
    assert t.dtype == torch_dtype
    assert lx.to_jax(t).dtype == dtype
    assert torch.equal(t.cpu(), torch.ones(2, 2, dtype=torch_dtype))


def test_to_jax_inside_a_captured_function_says_what_to_do(dev):
    def body(carry, x):
        lx.to_jax(carry)
        return carry + x, x

    with pytest.raises(RuntimeError, match="Use lx.call_jax there"):
        lx.experimental.scan(body, torch.zeros(2).to(dev), torch.ones(3, 2).to(dev))


def test_view_gets_its_own_buffer(dev):
    t = torch.arange(12.0).reshape(3, 4).to(dev)
    a = lx.to_jax(t.t()[1])
    np.testing.assert_allclose(np.asarray(a), [1.0, 5.0, 9.0])


def test_partial_and_static_leaf_functions_key_by_identity(dev):
    f = functools.partial(jnp.multiply, 3.0)
    x = torch.ones(2).to(dev)
    torch.testing.assert_close(lx.call_jax(f, x).cpu(), torch.full((2,), 3.0))


def test_optax_update_in_place_inside_one_step_graph_matches_torch_adam(dev):
    pytest.importorskip("optax")
    import copy

    from lazyxla.examples import optax_step

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model = copy.deepcopy(ref).to(dev)
    x, y = torch.randn(16, 6), torch.randn(16, 1)
    counts = []
    real_sync = lx.sync

    def counting_sync(*args, **kwargs):
        real_sync(*args, **kwargs)
        counts.append((counter("UncachedCompile"), counter("ExecuteComputation")))

    optax_step.lx.sync = counting_sync
    try:
        losses = optax_step.train(model, x.to(dev), y.to(dev), 4)
    finally:
        optax_step.lx.sync = real_sync
    # the init's graph, then one graph per step, compiled once
    assert [c for c, _ in counts] == [1, 2, 2, 2, 2] and [e for _, e in counts] == [1, 2, 3, 4, 5]
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for i in range(4):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ref(x), y)
        loss.backward()
        opt.step()
        assert abs(losses[i] - loss.item()) < 1e-5
    for p, r in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), r.detach(), rtol=1e-5, atol=1e-6)


def test_eager_mode_runs_the_call_when_made(dev):
    x = torch.randn(3).to(dev)
    with lx.experimental.eager_mode_context(True):
        y = lx.call_jax(jnp.exp, x)
        assert counter("ExecuteComputation") == 1
    assert "nothing pending" in lx.debug.ir_text([y])
    torch.testing.assert_close(y.cpu(), torch.exp(x.cpu()))


_SPMD_SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp, torch
    import lazyxla as lx
    lx.spmd.use_spmd()
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("a", "b"))
    a = jax.device_put(jnp.arange(32.0).reshape(8, 4), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("a")))
    t = lx.from_jax(a)
    assert lx.spmd.sharding_spec(t) == ("a", None), lx.spmd.sharding_spec(t)
    y = lx.call_jax(lambda v: v * 2, t) + 1
    torch.testing.assert_close(y.cpu(), torch.arange(32.0).reshape(8, 4) * 2 + 1)
    b = lx.to_jax(t)
    assert b.sharding == a.sharding
    assert [s.data.unsafe_buffer_pointer() for s in b.addressable_shards] == \\
        [s.data.unsafe_buffer_pointer() for s in a.addressable_shards]
    t.add_(1)
    lx.sync()
    assert not a.is_deleted() and float(a[0, 0]) == 0.0 and t.cpu()[0, 0].item() == 1.0
    print("OK spmd")
""")


@pytest.mark.slow   # a subprocess with 8 host devices: about 8 s
def test_sharded_arrays_keep_their_sharding_without_copies():
    out = run_on_host_devices(_SPMD_SCRIPT, timeout=300)
    assert out.returncode == 0 and "OK spmd" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
