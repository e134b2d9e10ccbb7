"""Fused optimizers (`Adam/AdamW/SGD(fused=True)`): each `_fused_*_` call is one node
(frontend/fused_optim.py, lower/fused_optim.py), with the values of eager's CPU kernels."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from lazyxla.ir.build import data_node, op_node, scalar_node
from lazyxla.ir.check import MalformedIR, check_node
from lazyxla.ir.node import FUSED_ADAM, FUSED_SGD
from lazyxla.state import STATE

from helpers import counter, fake_buffer, float32_math_tolerance, host_fallbacks, rand

# Under 16 elements each: torch 2.13's CPU `_fused_sgd_` leaves the vectorised part of a
# bf16 parameter (16 elements on) unchanged, so only its scalar loop is a reference.
SHAPES = [(3, 5), (4,), (3, 2, 2)]
ADAM = {
    "adam": dict(cls=torch.optim.Adam, lr=1e-2),
    "adam_wd_amsgrad_maximize": dict(cls=torch.optim.Adam, lr=1e-2, weight_decay=1e-2, amsgrad=True, maximize=True),
    "adamw": dict(cls=torch.optim.AdamW, lr=1e-2, weight_decay=1e-1),
    "adamw_amsgrad_no_decay": dict(cls=torch.optim.AdamW, lr=1e-2, weight_decay=0.0, amsgrad=True, betas=(0.8, 0.99)),
    "adamw_tensor_lr": dict(cls=torch.optim.AdamW, lr="tensor", weight_decay=1e-1),
    "adam_tensor_lr_wd": dict(cls=torch.optim.Adam, lr="tensor", weight_decay=1e-2),
}
SGD = {
    "sgd": dict(cls=torch.optim.SGD, lr=0.1),
    "sgd_momentum_dampening_maximize": dict(cls=torch.optim.SGD, lr=0.1, momentum=0.9, dampening=0.3, maximize=True),
    "sgd_nesterov_wd": dict(cls=torch.optim.SGD, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "sgd_tensor_lr_momentum": dict(cls=torch.optim.SGD, lr="tensor", momentum=0.5),
}


def _optimizer(config: dict, params: list, device) -> torch.optim.Optimizer:
    kw = dict(config)
    cls = kw.pop("cls")
    if kw["lr"] == "tensor":
        # a lazy lr on the device, a CPU one for eager (torch's fused kernels take either)
        kw["lr"] = torch.tensor(1e-2).to(device)
    return cls(params, fused=True, **kw)


def _params(dtype: torch.dtype, device) -> list:
    return [torch.nn.Parameter(rand(*s, seed=i, dtype=dtype).to(device)) for i, s in enumerate(SHAPES)]


def _state(opt: torch.optim.Optimizer) -> list:
    return [v.detach().cpu() for p in opt.param_groups[0]["params"] for v in opt.state[p].values()
            if isinstance(v, torch.Tensor)]


def _steps(dtype: torch.dtype, config: dict, device, sync=None) -> list:
    params = _params(dtype, device)
    opt = _optimizer(config, params, device)
    for step in range(3):
        for i, p in enumerate(params):
            p.grad = rand(*p.shape, seed=10 * step + i, dtype=dtype).to(device)
        opt.step()
        if sync:
            sync()
    return [p.detach().cpu() for p in params] + _state(opt)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", sorted(ADAM) + sorted(SGD))
def test_fused_steps_match_the_cpu_fused_kernels(name, dtype, dev):
    config = {**ADAM, **SGD}[name]
    exp = _steps(dtype, config, "cpu")
    got = _steps(dtype, config, dev, sync=lx.sync)
    # bf16: the kernels round the float32 update once into bf16, as here; an ulp apart where
    # their FMAs round the float32 value the other way
    # f32: Adam's square root and division are approximations on a TPU (float32_math_tolerance)
    tol = float32_math_tolerance(1e-5, 1e-6) if dtype == torch.float32 else dict(rtol=8e-3, atol=1e-5)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        torch.testing.assert_close(g, e, **tol)
    assert host_fallbacks() == []


@pytest.mark.parametrize("op", ["adamw", "adam_amsgrad", "sgd_momentum"])
@pytest.mark.parametrize("found", [0.0, 1.0])
def test_grad_scale_and_found_inf_as_the_cpu_kernels(op, found, dev):
    """GradScaler's arguments: gradients unscaled and written back, the update from the
    unscaled gradient; found_inf 1 leaves every tensor, gradients included, as it was."""
    runs = []
    for device in ("cpu", dev):
        params = [rand(*s, seed=i).to(device) for i, s in enumerate(SHAPES)]
        grads = [rand(*s, seed=5 + i).mul(1024).to(device) for i, s in enumerate(SHAPES)]
        state = [[rand(*s, seed=20 + 3 * i + k).abs().to(device) for i, s in enumerate(SHAPES)] for k in range(3)]
        scale, found_inf = torch.full((), 1024.0).to(device), torch.full((), found).to(device)
        steps = [torch.full((), 3.0).to(device) for _ in SHAPES]
        options = dict(lr=1e-2, weight_decay=1e-2, maximize=False, grad_scale=scale, found_inf=found_inf)
        if op == "sgd_momentum":
            torch._fused_sgd_(params, grads, state[0], momentum=0.9, dampening=0.1, nesterov=False,
                              is_first_step=False, **options)
        else:
            fused = torch._fused_adamw_ if op == "adamw" else torch._fused_adam_
            amsgrad = op == "adam_amsgrad"
            fused(params, grads, state[0], state[1], state[2] if amsgrad else [], steps, beta1=0.9, beta2=0.999,
                  eps=1e-8, amsgrad=amsgrad, **options)
        runs.append([t.cpu() for t in params + grads + state[0] + state[1] + state[2]])
    for g, e in zip(runs[1], runs[0]):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    if found:
        untouched = [rand(*s, seed=i) for i, s in enumerate(SHAPES)]
        assert all(torch.equal(g, e) for g, e in zip(runs[1][:len(SHAPES)], untouched))


@pytest.mark.parametrize("name", ["adamw", "adamw_tensor_lr", "sgd_nesterov_wd"])
def test_traced_ops_per_step_do_not_grow_with_the_parameters(name, dev):
    """One node per fused call: an optimizer step traces the same ops for 2 parameters
    as for 40 (Adam: torch's step count `_foreach_add_` and the fused call; a tensor lr
    adds none), and the parameters' IR is one fused node and a GETITEM per parameter."""
    config = {**ADAM, **SGD}[name]
    adam = config["cls"] is not torch.optim.SGD
    fused = "lazyxla::fused_adam" if adam else "lazyxla::fused_sgd"
    counts = []
    for n in (2, 40):
        params = [torch.nn.Parameter(rand(3, 2, seed=i).to(dev)) for i in range(n)]
        opt = _optimizer(config, params, dev)
        with STATE.scoped(implied_barriers=False):
            for _ in range(2):   # the second step: the optimizer state exists
                for p in params:
                    p.grad = torch.ones(3, 2, device=dev)
                lx.sync()
                before = counter("TracedOps")
                opt.step()
                traced = counter("TracedOps") - before
                ops = [node.op for node in lx.debug.ir_nodes(params)]
                lx.sync()
        counts.append((traced, ops.count(fused), ops.count("lazyxla::getitem")))
    assert counts == [(2 if adam else 1, 1, n) for n in (2, 40)]
    assert host_fallbacks() == []


def test_the_ir_checker_holds_a_fused_node_to_the_tensors_it_writes(dev, checked_ir):
    params = [torch.nn.Parameter(rand(4, seed=i).to(dev)) for i in range(3)]
    opt = torch.optim.Adam(params, lr=1e-2, amsgrad=True, fused=True)
    for p in params:
        p.grad = torch.ones(4, device=dev)
    with STATE.scoped(implied_barriers=False):
        opt.step()
        assert lx.debug.check_ir(params) > 0
    lx.sync()   # checked again at the sync
    a, b = data_node(fake_buffer((3,))), data_node(fake_buffer((2,)))
    options = {"lr": scalar_node(0.1), "weight_decay": None, "momentum": scalar_node(0.9),
               "one_minus_dampening": None, "nesterov": False, "maximize": False, "is_first_step": True,
               "grad_scale": None, "found_inf": None}
    good = op_node(FUSED_SGD, ((a,), (a,), (a,)), options, ((3,), (3,)), (torch.float32, torch.float32), 2)
    check_node(good)
    with pytest.raises(MalformedIR, match="avals of the tensors it writes"):
        check_node(op_node(FUSED_SGD, ((a,), (a,), (b,)), options, ((3,), (3,)), (torch.float32,) * 2, 2))
    with pytest.raises(MalformedIR, match="one output per tensor it writes"):
        check_node(op_node(FUSED_SGD, ((a,), (a,), (a,)), options, ((3,),), (torch.float32,), 1))
    with pytest.raises(MalformedIR, match="reads \\(its call's tensor lists"):
        check_node(op_node(FUSED_ADAM, ((a,), (a,)), options, ((3,),), (torch.float32,), 1))


def test_refused_calls_write_nothing(dev):
    p, g = rand(3).to(dev), rand(3).to(dev)
    with pytest.raises(RuntimeError, match="1 parameters but 2 grads"):
        torch._fused_sgd_([p], [g, g], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=False)
    with pytest.raises(RuntimeError, match="lazyxla device"):
        torch._fused_sgd_([p], [rand(3)], [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=False)
    torch.testing.assert_close(p.cpu(), rand(3))


def test_the_first_steps_graph_is_every_steps_graph(dev, host_replay):
    """The optimizer state made inside the first step is newer than that step's other
    pending tensors and older than every later step's: the fused node's outputs still take
    one place in the graph (sync/collect.py `_grouped`), so step 2 compiles nothing (with
    host replay on, as users run, the fresh step counts enter as device data: sync/entries.py)."""
    params = [torch.nn.Parameter(rand(3, 2, seed=i).to(dev)) for i in range(3)]
    opt = torch.optim.AdamW(params, lr=1e-2, fused=True)
    x = rand(4).to(dev)
    compiles, sums = [], []
    for step in range(3):
        for p in params:
            p.grad = rand(3, 2, seed=10 + step).to(dev)
        sums.append(x.exp())   # pending work of this step beside the optimizer's
        before = counter("UncachedCompile")
        opt.step()   # the implied step barrier
        compiles.append(counter("UncachedCompile") - before)
    assert compiles == [1, 0, 0]
