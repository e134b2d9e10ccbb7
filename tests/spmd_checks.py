"""SPMD checks, run by tests/test_spmd.py in subprocesses with 8 forced host devices
(the device count is fixed when JAX starts): `python tests/spmd_checks.py GROUP`.

Each group prints "OK <group>" when every check passed; a failed check raises.
"""
from __future__ import annotations

import copy
import sys

import torch

import lazyxla as lx
from lazyxla.workloads import GPT, GPTConfig, Workload, make

alias = lambda: lx.metrics.metric_data("InputOutputAliasCount")  # noqa: E731


def expect_error(kind, fn, *fragments):
    try:
        fn()
    except kind as e:
        for f in fragments:
            assert f in str(e), (f, str(e))
        return e
    raise AssertionError(f"expected {kind.__name__}")


def data_of(t):
    return t._st.value.data


def use_spmd_after_tensors():
    t = torch.ones(2, device=lx.device())
    expect_error(RuntimeError, lx.spmd.use_spmd, "before any lazyxla tensor exists")
    assert not lx.spmd.is_spmd() and t.tolist() == [1.0, 1.0]
    del t
    lx.spmd.use_spmd()
    assert lx.spmd.is_spmd() and lx.device_count() == 1


def check_basics():
    """SPEC G.51/G.52, marking, reading, flows through views and in-place updates."""
    use_spmd_after_tensors()
    mesh = lx.spmd.Mesh(range(8), (8,), ("x",))
    dev = lx.device()

    # G.51: xs = mark_sharding(1x8); xs += 1; sync -> one graph, one alias
    host = torch.arange(8.0).reshape(1, 8)
    xs = lx.spmd.mark_sharding(host.to(dev), mesh, (None, "x"))
    assert data_of(xs)._array is None   # staged: placed by slices at first use, never replicated
    lx.metrics.clear_all()
    xs += 1
    lx.sync()
    assert alias()[0] == 1 and alias()[1] == 1.0, alias()
    assert lx.spmd.sharding_spec(xs) == (None, "x")
    assert xs.cpu().tolist() == (host + 1).tolist()
    shards = lx.spmd.local_shards(xs)
    assert [s.tolist() for s in shards] == [[[i + 1.0]] for i in range(8)]
    before = lx.metrics.counter_value("UncachedCompile")
    xs += 1
    lx.sync()
    assert lx.metrics.counter_value("UncachedCompile") == before   # same sharding, no recompile

    # G.52 (our gate is the runtime aliasing switch; lazyxla has no auto-sharding): scenario 1
    # on sharded tensors donates 2; with aliasing off, 0, and a marked donor stays alive.
    for aliasing, expected in ((True, 2.0), (False, 0.0)):
        lx.set_aliasing(aliasing)
        t1 = lx.spmd.mark_sharding(torch.randn(4, 2, 2).to(dev), mesh, (None, None, None))
        t2 = lx.spmd.mark_sharding(torch.randn(8, 2, 2).to(dev), mesh, ("x", None, None))
        t1c, t2c = t1.cpu(), t2.cpu()
        lx.sync()
        buffers = [data_of(t).array for t in (t1, t2)]   # placed by now (t2: 8 shards)
        lx.metrics.clear_all()
        t3 = t1 + t2[:4]
        t1 *= 2.0
        t2 += 2.0
        marked = torch.ones(8).to(dev)
        lx.spmd.mark_sharding(marked, mesh, ("x",))
        assert lx.set_buffer_donation(marked, True)
        y = marked + 1
        buffers.append(data_of(marked).array)
        lx.sync()
        assert all(b.is_deleted() == aliasing for b in buffers)  # a donated tensor frees all its shards
        assert alias()[1] == expected + (1.0 if aliasing else 0.0), (aliasing, alias())
        assert torch.allclose(t3.cpu(), t1c + t2c[:4]) and torch.allclose(t1.cpu(), t1c * 2)
        assert torch.allclose(t2.cpu(), t2c + 2) and y.tolist() == [2.0] * 8
        assert lx.is_donated(marked) == aliasing
        if not aliasing:
            assert marked.tolist() == [1.0] * 8
    lx.set_aliasing(True)

    # pending IR gets a constraint; the result keeps it; clear_sharding replicates
    z = xs * 2
    lx.spmd.mark_sharding(z, mesh, (None, 0))
    assert lx.spmd.sharding_spec(z) == (None, "x")
    lx.sync()
    assert lx.spmd.sharding_spec(z) == (None, "x") and z.cpu().tolist() == ((host + 2) * 2).tolist()
    lx.spmd.clear_sharding(z)
    assert lx.spmd.sharding_spec(z) is None and len(lx.spmd.local_shards(z)[0].flatten()) == 8

    # views and writes through views keep the base's sharding
    w = lx.spmd.mark_sharding(torch.arange(32.0).reshape(8, 4).to(dev), mesh, ("x", None))
    ref = torch.arange(32.0).reshape(8, 4)
    w[2:5, 1] += 10
    ref[2:5, 1] += 10
    assert w[3].tolist() == ref[3].tolist() and w.t().cpu().tolist() == ref.t().tolist()
    lx.sync()
    assert lx.spmd.sharding_spec(w) == ("x", None) and w.cpu().tolist() == ref.tolist()
    assert [tuple(s.shape) for s in lx.spmd.local_shards(w)] == [(1, 4)] * 8
    w.copy_(torch.ones(8, 4))                 # an upload into a sharded tensor keeps its sharding
    assert lx.spmd.sharding_spec(w) == ("x", None) and w.sum().item() == 32.0

    # 2-D mesh, tuple entries, unnamed axes (indices)
    m2 = lx.spmd.Mesh(range(8), (2, 4))
    assert m2.shape() == {0: 2, 1: 4} and m2.get_logical_mesh().shape == (2, 4)
    v = lx.spmd.mark_sharding(torch.arange(64.0).reshape(8, 8).to(dev), m2, (0, 1))
    assert lx.spmd.sharding_spec(v) == (0, 1) and (v @ v).cpu().equal(torch.arange(64.0).reshape(8, 8) @
                                                                   torch.arange(64.0).reshape(8, 8))
    lx.spmd.mark_sharding(v, m2, ((0, 1), None))
    assert lx.spmd.sharding_spec(v) == ((0, 1), None) and len(lx.spmd.local_shards(v)) == 8
    assert lx.spmd.get_1d_mesh("d").shape() == {"d": 8}
    lx.spmd.set_global_mesh(m2)
    assert lx.spmd.get_global_mesh() is m2

    # torch.compile and gradient accumulation run on sharded inputs too
    host = torch.randn(8, 2)
    sx = lx.spmd.mark_sharding(host.to(dev), mesh, ("x", None))
    compiled = torch.compile(lambda a: (a * 2).sum(0), backend="lazyxla")
    # the sharded sum adds eight partial sums, in another order than the host's: a sum near
    # zero differs by rounding (1.8e-7 seen), so an absolute tolerance, not only rtol's
    for _ in range(2):
        assert torch.allclose(compiled(sx).cpu(), (host * 2).sum(0), atol=1e-5)
    cpu_model = torch.nn.Linear(2, 1)
    model = copy.deepcopy(cpu_model).to(dev)
    hx, hy = torch.randn(4, 8, 2), torch.randn(4, 8, 1)
    step = lambda m: lambda a, b: ((m(a) - b) ** 2).mean()  # noqa: E731
    loss = lx.experimental.gradient_accumulation(
        step(model), [lx.spmd.mark_sharding(hx.to(dev), mesh, (None, "x", None)), hy.to(dev)], model)
    ref = sum(step(cpu_model)(a, b) for a, b in zip(hx, hy)) / 4
    ref.backward()
    assert torch.allclose(loss.cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    assert torch.allclose(model.weight.grad.cpu(), cpu_model.weight.grad, rtol=1e-5, atol=1e-6)
    print("OK basics")


def check_mesh_regressions(dev):
    """A weight sharded over two mesh axes trained in one graph with its backward and
    AdamW (JAX described XLA's output shardings on the one-axis default mesh:
    IndivisibleError), and scalar operands next to a mesh that lists the devices in
    another order (JAX refused the mix)."""
    mesh = lx.spmd.Mesh(range(8), (2, 4), ("a", "b"))
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = copy.deepcopy(ref).to(dev)
    lx.spmd.mark_sharding(model[0].weight, mesh, ("a", "b"))
    lx.spmd.mark_sharding(model[2].weight, mesh, ("b", "a"))
    opt, opt_ref = torch.optim.AdamW(model.parameters(), lr=1e-2), torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x = torch.randn(6, 8)
    for _ in range(2):
        for m, o, inp in ((model, opt, x.to(dev)), (ref, opt_ref, x)):
            loss = m(inp).pow(2).mean()
            o.zero_grad()
            loss.backward()
            o.step()
        lx.sync()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.cpu(), q.detach(), rtol=1e-5, atol=1e-6)

    reversed_mesh = lx.spmd.Mesh(list(reversed(range(8))), (8,), ("x",))
    host = torch.arange(16.0).reshape(8, 2)
    t = lx.spmd.mark_sharding(host.to(dev), reversed_mesh, ("x", None))
    assert (t * 2.5 + 1).cpu().tolist() == (host * 2.5 + 1).tolist()
    t.mul_(3.0)
    lx.sync()
    assert t.cpu().tolist() == (host * 3).tolist() and lx.spmd.sharding_spec(t) == ("x", None)


def check_errors():
    lx.spmd.use_spmd()
    dev = lx.device()
    mesh = lx.spmd.Mesh(range(8), (2, 4), ("a", "b"))
    t = torch.arange(16.0).reshape(4, 4).to(dev)
    expect_error(TypeError, lambda: lx.spmd.mark_sharding(torch.ones(4), mesh, ("a",)), "t.to(lx.device())")
    expect_error(ValueError, lambda: lx.spmd.mark_sharding(t, mesh, ("a", None, None)),
                 "3 entries", "2 dimensions", "one entry per dimension")
    expect_error(ValueError, lambda: lx.spmd.mark_sharding(t, mesh, ("a", "c")), "unknown mesh axis name 'c'")
    expect_error(ValueError, lambda: lx.spmd.mark_sharding(t, mesh, (5, None)), "not a mesh axis")
    expect_error(ValueError, lambda: lx.spmd.mark_sharding(t, mesh, ("a", "a")), "appears twice")
    expect_error(ValueError, lambda: lx.spmd.mark_sharding(t, mesh, (("a", "b"), None)), "cannot be split 8 ways")
    expect_error(ValueError, lambda: lx.spmd.mark_sharding(t[0], mesh, ("a",)), "mark the base tensor")
    expect_error(ValueError, lambda: lx.spmd.Mesh(range(16), (16,)), "only 8 devices", "smaller mesh")
    expect_error(ValueError, lambda: lx.spmd.Mesh(range(8), (2, 2)), "needs 4 device ids")
    expect_error(ValueError, lambda: lx.spmd.Mesh(range(8), (8,), ("a", "b")), "axis_names")
    assert lx.spmd.sharding_spec(t) is None and t.sum().item() == 120.0   # nothing changed
    expect_error(RuntimeError, lambda: lx.distributed.initialize("127.0.0.1:1", 2, 0),
                 "before any lazyxla tensor", "right after `import lazyxla`")
    assert lx.distributed.process_index() == 0 and lx.distributed.process_count() == 1

    # two meshes ordering the devices differently in one computation
    a = lx.spmd.mark_sharding(torch.ones(8).to(dev), lx.spmd.Mesh(range(8), (8,)), (0,))
    b = lx.spmd.mark_sharding(torch.ones(8).to(dev), lx.spmd.Mesh(list(reversed(range(8))), (8,)), (0,))
    c = a + b
    expect_error(ValueError, lx.sync, "different meshes", "same mesh")
    assert a.tolist() == [1.0] * 8 and b.tolist() == [1.0] * 8      # nothing lost
    lx.spmd.mark_sharding(b, lx.spmd.Mesh(range(8), (8,)), (0,))
    del c   # it still reads b's buffer on the other mesh
    lx.sync()
    assert (a + b).tolist() == [2.0] * 8
    check_mesh_regressions(dev)   # before any set_global_mesh: unmarked tensors on the default mesh
    print("OK errors")


def small_gpt(batch: int = 8) -> Workload:
    cfg = GPTConfig(vocab=256, d=64, heads=4, layers=2, seq=32)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=gen)
    return Workload("gpt", GPT(cfg), tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def workload(name: str) -> Workload:
    return small_gpt() if name == "gpt" else make("mlp", batch=16)


def eager_losses(w: Workload, steps: int) -> list:
    model = copy.deepcopy(w.model)
    opt = w.optimizer(model.parameters())
    losses = []
    for _ in range(steps):
        loss = w.loss(model, w.inputs, w.targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def spmd_losses(w: Workload, steps: int, mesh, batch_axis, param_axis, ways: int) -> list:
    """Train `w` on the SPMD device: batch split over `batch_axis`, parameters (FSDP) over
    `param_axis` (None: data parallel, parameters replicated). Checks every step after
    warm-up compiles nothing, donates every parameter, and keeps shards at 1/ways."""
    dev = lx.device()
    model = copy.deepcopy(w.model).to(dev)
    sharded = lx.spmd.shard_parameters(model, mesh, param_axis) if param_axis is not None else []
    assert bool(sharded) == (param_axis is not None)
    params = dict(model.named_parameters())
    specs = {n: lx.spmd.sharding_spec(p) for n, p in params.items()}
    opt = w.optimizer(model.parameters())
    losses = []
    for step in range(steps):
        x = lx.spmd.mark_sharding(w.inputs.to(dev), mesh, (batch_axis,) + (None,) * (w.inputs.dim() - 1))
        y = lx.spmd.mark_sharding(w.targets.to(dev), mesh, (batch_axis,) + (None,) * (w.targets.dim() - 1))
        before = {n: data_of(p) for n, p in params.items()}
        compiles = lx.metrics.counter_value("UncachedCompile") or 0
        loss = w.loss(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lx.sync()
        losses.append(loss.item())
        if step >= 2:   # warm-up: SGD with momentum compiles two step graphs, AdamW one
            assert (lx.metrics.counter_value("UncachedCompile") or 0) == compiles, f"recompiled at step {step}"
        kept = [n for n, d in before.items() if not d.is_donated]
        assert not kept, f"step {step}: parameters not donated: {kept}"
        assert {n: lx.spmd.sharding_spec(p) for n, p in params.items()} == specs, "a parameter was resharded"
    for n in sharded:
        p = params[n]
        shards = lx.spmd.local_shards(p)
        assert all(s.numel() * ways == p.numel() for s in shards), (n, [s.shape for s in shards])
    return losses


def check_training(name: str):
    lx.spmd.use_spmd()
    w = workload(name)
    steps = 4
    ref = eager_losses(w, steps)
    m1 = lx.spmd.Mesh(range(8), (8,), ("data",))
    m2 = lx.spmd.Mesh(range(8), (2, 4), ("data", "fsdp"))
    runs = {
        "data parallel": spmd_losses(w, steps, m1, "data", None, 1),
        "fsdp 1-D": spmd_losses(w, steps, m1, "data", "data", 8),
        "fsdp 2-D": spmd_losses(w, steps, m2, ("data", "fsdp"), "fsdp", 4),
    }
    for what, losses in runs.items():
        assert torch.allclose(torch.tensor(losses), torch.tensor(ref), rtol=1e-4), (what, losses, ref)
    print(f"OK {name}")


def check_loader():
    """lx.data.DeviceLoader(sharding=...): each batch tensor placed by its spec at upload,
    shard by shard (no replicated copy first), others replicated; dict specs by key; the
    minibatch divisibility rule."""
    lx.spmd.use_spmd()
    mesh = lx.spmd.Mesh(range(8), (4, 2), ("fsdp", "tensor"))
    spec = lx.spmd.ShardingSpec(mesh, ("fsdp", None))
    expect_error(ValueError, lambda: lx.spmd.ShardingSpec(mesh, ("data", None)), "unknown mesh axis name 'data'")
    batches = [{"ids": torch.arange(32).reshape(8, 4) + i, "lengths": torch.arange(8) + i, "n": torch.tensor(i)}
               for i in range(3)]
    for i, b in enumerate(lx.data.DeviceLoader(batches, sharding=spec, prefetch=2)):
        ids = b["ids"]
        assert lx.spmd.sharding_spec(ids) == ("fsdp", None), lx.spmd.sharding_spec(ids)
        array = data_of(ids)._array
        assert array is not None and data_of(ids).host is None   # placed at upload, not staged
        assert {s.data.shape for s in array.addressable_shards} == {(2, 4)}
        assert [s.tolist() for s in lx.spmd.local_shards(ids)][::2] == \
            [batches[i]["ids"][2 * k:2 * k + 2].tolist() for k in range(4)]
        assert lx.spmd.sharding_spec(b["lengths"]) is None and lx.spmd.sharding_spec(b["n"]) is None
        assert (ids.sum() + b["lengths"].sum()).item() == batches[i]["ids"].sum() + batches[i]["lengths"].sum()
    by_key = {"ids": lx.spmd.ShardingSpec(mesh, (None, "tensor")), "lengths": spec, "n": None}
    b = next(iter(lx.data.DeviceLoader(batches, sharding=by_key)))
    assert lx.spmd.sharding_spec(b["ids"]) == (None, "tensor") and lx.spmd.sharding_spec(b["n"]) is None
    assert lx.spmd.sharding_spec(b["lengths"]) is None   # rank 1: the 2-entry spec does not apply
    missing = {"ids": spec}
    expect_error(KeyError, lambda: next(iter(lx.data.DeviceLoader(batches, sharding=missing))), "['lengths', 'n']")
    mini = lx.spmd.ShardingSpec(mesh, ("fsdp", None), minibatch=True)
    b = next(iter(lx.data.DeviceLoader([torch.ones(8, 2)], sharding=mini)))
    assert lx.spmd.sharding_spec(b) == ("fsdp", None) and b.sum().item() == 16.0
    expect_error(RuntimeError, lambda: next(iter(lx.data.DeviceLoader([torch.ones(4, 2)], sharding=mini))),
                 "divisible by the number of local devices")
    print("OK loader")


def check_fsdp_v2():
    """torch_xla's SpmdFullyShardedDataParallel under lazyxla.compat (upstream's
    test/spmd/test_fsdp_v2.py, checked by value and sharding spec)."""
    import functools

    import lazyxla.compat as compat
    compat.install()
    import torch_xla.distributed.fsdp as fsdp
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2
    nn = torch.nn

    class SimpleLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.relu, self.fc2 = nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))

    xr.use_spmd()
    expect_error(ValueError, lambda: FSDPv2(SimpleLinear()), "No mesh is provided")
    mesh = xs.Mesh(range(8), (8, 1), ("fsdp", "tensor"))
    torch.manual_seed(0)
    ref = SimpleLinear()
    model = copy.deepcopy(ref).to("xla")
    model.fc1 = FSDPv2(model.fc1, mesh=mesh)
    model.fc2 = FSDPv2(model.fc2, mesh=mesh)
    model = FSDPv2(model, mesh=mesh)
    spec = lx.spmd.sharding_spec
    assert spec(model.fc1.weight) == (None, "fsdp") and spec(model.fc2.weight) == (None, "fsdp")  # largest dim
    assert spec(model.fc1.bias) == ("fsdp",) and spec(model.fc2.bias) is None   # 1 element: not divisible
    x = torch.randn(16, 128)
    xd = xs.mark_sharding(x.to("xla"), mesh, ("fsdp", None))
    out = model(xd)
    assert spec(out) == ("fsdp", None), spec(out)
    assert torch.allclose(out.cpu(), ref(x), atol=1e-5)
    out.sum().backward()
    assert "optimization_barrier" in lx.debug.ir_text([model.fc2.weight.grad])
    ref(x).sum().backward()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad.cpu(), q.grad, atol=1e-5), name
    expect_error(RuntimeError, lambda: FSDPv2(model, mesh=mesh), "already wrapped")
    expect_error(RuntimeError, lambda: FSDPv2(nn.ModuleList([nn.Linear(2, 2)]), mesh=mesh), "forward")
    expect_error(ValueError, lambda: FSDPv2(SimpleLinear(), mesh=xs.Mesh(range(8), (8,), ("data",))),
                 "axis named 'fsdp'")
    expect_error(ValueError, lambda: FSDPv2(SimpleLinear(), mesh=mesh, extra_data_axis="ddp"),
                 "The provided ddp axis is not in the mesh.")

    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    wrapped = FSDPv2(SimpleLinear(), mesh=mesh, auto_wrap_policy=policy)   # a CPU model: moved
    assert isinstance(wrapped.fc1, FSDPv2) and isinstance(wrapped.fc2, FSDPv2)
    assert isinstance(wrapped.fc1.weight, lx.LazyTensor) and wrapped.fc1.weight.device == torch.device("xla", 0)
    assert spec(wrapped.fc1.weight) == (None, "fsdp")
    plain = FSDPv2(SimpleLinear(), mesh=mesh, auto_wrap_policy=policy, auto_wrapper_callable=lambda m, **kw: m)
    assert not isinstance(plain.fc1, FSDPv2) and not isinstance(plain.fc2, FSDPv2)
    xs.set_global_mesh(mesh)
    assert FSDPv2(SimpleLinear())._mesh is mesh

    mesh3 = xs.Mesh(range(8), (2, 4, 1), ("data", "fsdp", "tensor"))
    torch.manual_seed(1)
    ref3 = SimpleLinear()
    model3 = FSDPv2(copy.deepcopy(ref3), mesh=mesh3, extra_data_axis="data")
    assert spec(model3.fc1.weight) == (None, "fsdp")
    xd = xs.mark_sharding(x.to("xla"), mesh3, (("data", "fsdp"), None))
    out3 = model3(xd)
    assert spec(out3) == (("data", "fsdp"), None) and torch.allclose(out3.cpu(), ref3(x), atol=1e-5)

    ckpt = FSDPv2(fsdp.checkpoint_module(copy.deepcopy(ref3)), mesh=mesh)
    xg = x.to("xla").requires_grad_()
    ckpt(xg).sum().backward()
    ref3.zero_grad()
    xc = x.clone().requires_grad_()
    ref3(xc).sum().backward()
    assert torch.allclose(xg.grad.cpu(), xc.grad, atol=1e-5)
    assert torch.allclose(ckpt.module.fc1.weight.grad.cpu(), ref3.fc1.weight.grad, atol=1e-5)
    expect_error(NotImplementedError, lambda: fsdp.XlaFullyShardedDataParallel(SimpleLinear()),
                 "SpmdFullyShardedDataParallel")
    print("OK fsdp_v2")


if __name__ == "__main__":
    group = sys.argv[1]
    {"basics": check_basics, "errors": check_errors,
     "loader": check_loader, "fsdp_v2": check_fsdp_v2, "mlp": lambda: check_training("mlp"), "gpt": lambda: check_training("gpt")}[group]()
