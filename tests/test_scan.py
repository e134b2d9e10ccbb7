"""lx.experimental.scan / scan_layers (issue #22) against the plain Python loop in
eager PyTorch: values, gradients (to init, xs and closed-over tensors), an optimizer
over 3 steps, counters (traced ops flat in depth, no steady-state compiles) and the
errors for bad input."""
from __future__ import annotations

import copy
import re

import pytest
import torch

import lazyxla as lx
from lazyxla import metrics
from lazyxla.experimental import ScanError, scan, scan_layers
from helpers import assert_close, float32_math_tolerance


def python_scan(fn, init, xs):
    """The loop scan stands for, in eager."""
    carry, ys = init, []
    leaves, spec = torch.utils._pytree.tree_flatten(xs)
    for i in range(leaves[0].shape[0]):
        carry, y = fn(carry, torch.utils._pytree.tree_unflatten([x[i] for x in leaves], spec))
        ys.append(y)
    if ys[0] is None:
        return carry, None
    return carry, torch.utils._pytree.tree_map(lambda *t: torch.stack(t), *ys)


def leaves(*trees):
    return [t for tree in trees for t in torch.utils._pytree.tree_leaves(tree) if t is not None]


def grads_of(tensors):
    return [t.grad.cpu() if t.grad is not None else None for t in tensors]


def run_both(dev, make_fn, init, xs, closure):
    """Eager python loop and lazy scan from the same CPU values; returns both results and
    the gradients of a loss over everything, for init, xs and the closure."""
    out = {}
    for side in ("eager", "lazy"):
        move = (lambda t: t.to(dev)) if side == "lazy" else (lambda t: t.clone())
        req = lambda t: move(t).requires_grad_(t.dtype.is_floating_point)   # noqa: E731
        i, x, w = [torch.utils._pytree.tree_map(req, v) for v in (init, xs, closure)]
        fn = make_fn(w)
        carry, ys = (scan if side == "lazy" else python_scan)(fn, i, x)
        loss = sum((t.float() ** 2).sum() for t in leaves(carry, ys) if t.dtype.is_floating_point)
        loss.backward()
        out[side] = ([t.detach().cpu() for t in leaves(carry, ys)], grads_of(leaves(i, x, w)))
    return out["eager"], out["lazy"]


def test_scan_values_and_gradients(dev, checked_ir):
    torch.manual_seed(0)
    def make_fn(w):
        def fn(c, x):
            h = torch.tanh(c @ w + x)
            return h, h.sum(-1)
        return fn
    (values, grads), (lvalues, lgrads) = run_both(dev, make_fn, torch.randn(2, 4), torch.randn(5, 2, 4),
                                                  torch.randn(4, 4))
    # a TPU's tanh is up to 1,400 ulps off (helpers.float32_math_tolerance): five steps of a
    # recurrence and its gradient compound it to 2.7e-4 at values of 38 (the chip, 2026-12-07)
    for a, b in zip(lvalues + lgrads, values + grads):
        assert_close(a, b, **float32_math_tolerance(1e-4, 1e-5, floor=1e-3))


def test_scan_pytrees_int_carry_and_no_y(dev):
    torch.manual_seed(0)
    def make_fn(w):
        def fn(carry, x):
            h, count = carry["h"], carry["n"]
            h = torch.sigmoid(h * w + x[0] - x[1])
            return {"h": h, "n": count + 1}, None
        return fn
    init = {"h": torch.randn(3), "n": torch.tensor(0)}
    xs = (torch.randn(4, 3), torch.randn(4, 3))
    (values, grads), (lvalues, lgrads) = run_both(dev, make_fn, init, xs, torch.randn(3))
    for a, b in zip(lvalues + lgrads, values + grads):
        if b is None:
            assert a is None
        else:
            assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert lvalues[1].item() == 4   # the int carry counted the iterations


def test_scan_without_grad(dev):
    xs = torch.randn(6, 3)
    with torch.no_grad():
        carry, ys = scan(lambda c, x: (c + x, c * x), torch.zeros(3).to(dev), xs.to(dev))
    ref_c, ref_y = python_scan(lambda c, x: (c + x, c * x), torch.zeros(3), xs)
    assert_close(carry, ref_c)
    assert_close(ys, ref_y)


def test_random_ops_replay_their_values_in_backward(dev):
    """The backward re-runs fn: it must see the forward's dropout masks."""
    x = torch.ones(4, 1000).to(dev).requires_grad_()
    _, ys = scan(lambda c, x: (c, torch.nn.functional.dropout(x, 0.5, training=True)), torch.zeros(1).to(dev), x)
    ys.sum().backward()
    kept = (ys != 0).float().cpu()
    assert 0.4 < kept.mean().item() < 0.6
    assert not torch.equal(kept[0], kept[1])   # each iteration draws its own mask
    assert_close(x.grad.cpu(), kept * 2.0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.relu(self.fc(self.ln(x)))


def blocks(n):
    torch.manual_seed(0)
    return torch.nn.ModuleList([Block() for _ in range(n)])


def train_against_the_loop(dev, n_layers: int, **scan_layers_kwargs) -> list[tuple[int, int]]:
    """3 AdamW steps of `n_layers` blocks, run by scan_layers(**kwargs) and by the eager
    loop: gradients and losses equal each step, parameters at the end. Returns each
    step's (traced ops before the sync, compiles)."""
    ref = blocks(n_layers)
    lazy = copy.deepcopy(ref).to(dev)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(lazy.parameters(), lr=1e-2)
    x = torch.randn(3, 16)
    per_step = []
    for _ in range(3):
        h = x
        for block in ref:
            h = block(h)
        loss = (h ** 2).mean()
        opt_ref.zero_grad()
        loss.backward()
        opt_ref.step()

        metrics.clear_all()
        lazy_loss = (scan_layers(lazy, x.to(dev), **scan_layers_kwargs) ** 2).mean()
        opt.zero_grad()
        lazy_loss.backward()
        for p, q in zip(lazy.parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        opt.step()
        traced = metrics.counter_value("TracedOps")
        lx.sync()
        assert_close(lazy_loss, loss.detach(), rtol=1e-5)
        per_step.append((traced, metrics.counter_value("UncachedCompile") or 0))
    for p, q in zip(lazy.parameters(), ref.parameters()):
        assert_close(p, q.detach(), rtol=1e-4, atol=1e-6)
    return per_step


def test_scan_layers_trains_like_the_plain_loop(dev):
    compiles = [c for _, c in train_against_the_loop(dev, 4)]
    assert compiles[1:] == [0, 0], compiles


def traced_ops(dev, n):
    layers = blocks(n).to(dev)
    x = torch.randn(3, 16).to(dev)
    lx.sync()
    metrics.clear_all()
    loss = (scan_layers(layers, x) ** 2).mean()
    forward = metrics.counter_value("TracedOps")
    loss.backward()
    return forward, metrics.counter_value("TracedOps") - forward


def test_traced_ops_do_not_grow_with_depth(dev):
    fwd2, bwd2 = traced_ops(dev, 2)
    fwd12, bwd12 = traced_ops(dev, 12)
    assert fwd2 == fwd12
    # The backward traces the layer once too; what grows is autograd storing each layer's
    # .grad: one detach per parameter tensor (4 per Block).
    assert bwd12 - bwd2 == 10 * 4


def test_scan_layers_empty_and_several_inputs(dev):
    x = torch.randn(2, 3).to(dev)
    assert scan_layers([], x) is x

    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, a, b):
            return a * self.w + b, b - a

    torch.manual_seed(1)
    layers = [Pair() for _ in range(3)]
    a, b = torch.randn(3), torch.randn(3)
    ref = (a, b)
    for layer in layers:
        ref = layer(*ref)
    got = scan_layers([copy.deepcopy(layer).to(dev) for layer in layers], a.to(dev), b.to(dev))
    assert_close(got[0], ref[0].detach())
    assert_close(got[1], ref[1].detach())


# -- bad input ------------------------------------------------------------------------

def test_layers_that_differ_are_named(dev):
    same = blocks(2).to(dev)
    other = torch.nn.ModuleList([same[0], torch.nn.Linear(16, 16).to(dev)])
    x = torch.randn(3, 16).to(dev)
    with pytest.raises(ScanError, match=r"mismatched keys: layer 0 \(Block\) has 'ln.weight', layer 1 "
                                        r"\(Linear\) has not"):
        scan_layers(other, x)
    wide = Block()
    wide.fc = torch.nn.Linear(16, 16, bias=False)
    with pytest.raises(ScanError, match=r"layer 0 \(Block\) has 'fc.bias', layer 1 \(Block\) has not"):
        scan_layers([same[0], wide.to(dev)], x)

    class Twin(Block):
        pass
    with pytest.raises(ScanError, match="layer 1 is a Twin, layer 0 a Block"):
        scan_layers([same[0], Twin().to(dev)], x)
    shaped = Block()
    shaped.ln = torch.nn.LayerNorm(16, elementwise_affine=True).double()
    with pytest.raises(ScanError, match="'ln.weight' is a torch.float32 parameter in layer 0 and a torch.float64"):
        scan_layers([same[0], shaped.to(dev)], x)
    narrow = Block()
    narrow.fc = torch.nn.Linear(16, 8)
    with pytest.raises(ScanError, match=r"Shape mismatch of 'fc.weight': \[16, 16\] in layer 0, \[8, 16\] in layer 1"):
        scan_layers([same[0], narrow.to(dev)], x)


def test_host_read_inside_fn_is_refused(dev):
    def fn(c, x):
        if x.sum().item() > 0:
            return c + x, None
        return c, None
    with pytest.raises(RuntimeError, match="read on the host"):
        scan(fn, torch.zeros(3).to(dev), torch.randn(4, 3).to(dev))
    # nothing was left behind: the device still works
    assert_close(torch.ones(2).to(dev) * 2, torch.full((2,), 2.0))


def test_xs_of_different_lengths(dev):
    with pytest.raises(ScanError, match=r"different lengths along dim 0 \(\[4, 5\]\)"):
        scan(lambda c, x: (c, None), torch.zeros(3).to(dev), (torch.randn(4, 3).to(dev), torch.randn(5, 3).to(dev)))


def test_other_bad_input(dev):
    with pytest.raises(ScanError, match="must be a lazyxla tensor"):
        scan(lambda c, x: (c, None), torch.zeros(3), torch.randn(4, 3).to(dev))
    with pytest.raises(ScanError, match="must keep its shape and dtype"):
        scan(lambda c, x: (c.sum(), None), torch.zeros(3).to(dev), torch.randn(4, 3).to(dev))
    with pytest.raises(ScanError, match="fn must be callable"):
        scan(None, torch.zeros(3).to(dev), torch.randn(4, 3).to(dev))


# -- pure functions: traced once across calls ------------------------------------------

def test_pure_fn_is_traced_once_across_calls(dev):
    torch.manual_seed(0)
    w_ref = torch.randn(4, 4, requires_grad=True)
    w = w_ref.detach().to(dev).requires_grad_()
    calls = [0]

    def make_fn(weight):
        def fn(c, x):
            calls[0] += 1
            h = torch.tanh(c @ weight + x)
            return h, h.sum()
        return fn

    fn, fn_ref = make_fn(w), make_fn(w_ref)
    opt, opt_ref = torch.optim.SGD([w], lr=0.1), torch.optim.SGD([w_ref], lr=0.1)
    traces = []
    for length in (5, 5, 7):
        xs = torch.randn(length, 4)
        for side, f, o, weight in (("eager", fn_ref, opt_ref, w_ref), ("lazy", fn, opt, w)):
            move = (lambda t: t.to(dev)) if side == "lazy" else (lambda t: t)
            run = (lambda *a: scan(*a, is_fn_pure=True)) if side == "lazy" else python_scan
            before = calls[0]
            carry, ys = run(f, move(torch.zeros(4)), move(xs))
            if side == "lazy":
                lazy_calls = calls[0] - before
            loss = (carry ** 2).sum() + ys.sum()
            o.zero_grad()
            loss.backward()
            o.step()
        lx.sync()
        # three SGD steps through a tanh recurrence: 1.2e-3 at gradients of 2.9 on a TPU,
        # whose tanh is up to 1,400 ulps off (helpers.float32_math_tolerance)
        tolerance = float32_math_tolerance(1e-4, 1e-6, floor=3e-3)
        assert_close(w.grad, w_ref.grad, **tolerance)
        assert_close(w, w_ref.detach(), **tolerance)
        traces.append(lazy_calls)
    # the first call traces forward and backward; later calls (any length) trace nothing
    assert traces == [2, 0, 0], traces


def test_pure_layers_are_traced_once_across_steps(dev):
    traced = [t for t, _ in train_against_the_loop(dev, 3, is_layer_pure=True)]
    assert traced[1] == traced[2] < traced[0], traced


@pytest.mark.slow
def test_reference_gpt_with_scan_layers_trains_like_its_loop(dev):
    """workloads.GPTConfig(scan=True), the depth bench's model: same losses as the loop."""
    from lazyxla import workloads
    losses = {}
    for scan_on in (False, True):
        cfg = workloads.GPTConfig(vocab=64, d=32, heads=2, layers=3, seq=16, scan=scan_on)
        torch.manual_seed(0)
        model = workloads.gpt(cfg).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        idx = torch.randint(0, 64, (2, 16)).to(dev)
        losses[scan_on] = []
        for _ in range(3):
            logits = model(idx)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[scan_on].append(loss.item())
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)


# -- rematerialize=False: the forward loop saves activations -----------------------------

def tanh_fn(w):
    def fn(c, x):
        h = torch.tanh(c @ w + x)
        return h, h.sum(-1)
    return fn


def test_saved_activations_give_the_loops_values_and_gradients(dev):
    torch.manual_seed(0)
    init, xs, w = torch.randn(2, 4), torch.randn(5, 2, 4), torch.randn(4, 4)
    for fn_maker in (tanh_fn, layer_norm_fn,
                     lambda w: (lambda c, x: (torch.sigmoid(c * w[0] + x), torch.relu(c - x)))):
        out = {}
        for side in ("eager", "lazy"):
            move = (lambda t: t.to(dev)) if side == "lazy" else (lambda t: t.clone())
            i, x, ww = (move(t).requires_grad_() for t in (init, xs, w))
            run = (lambda f, a, b: scan(f, a, b, rematerialize=False)) if side == "lazy" else python_scan
            carry, ys = run(fn_maker(ww), i, x)
            ((carry ** 2).sum() + (ys ** 2).sum()).backward()
            out[side] = [carry, ys, i.grad, x.grad, ww.grad]
        for a, b in zip(out["lazy"], out["eager"]):
            # atol 1e-4: gradients of size 1e3 cancel to 0.05 here, and the read of the
            # carry (a wide read) cuts the program elsewhere than before: rounding order;
            # wider on a TPU, whose tanh is up to 1,400 ulps off (helpers.float32_math_tolerance)
            assert_close(a, b.detach(), **float32_math_tolerance(1e-4, 1e-4, floor=1e-3))


def layer_norm_fn(w):
    """sin, then a layer norm: its saved mean and rstd have no grad_fn (outputs autograd
    does not differentiate), and must be residuals too, or the backward re-runs sin."""
    def fn(c, x):
        h = torch.nn.functional.layer_norm(torch.sin(c @ w + x), (4,))
        return h, (h * x).sum(-1)   # not h.sum(-1): a normed row sums to 0, all rounding error
    return fn


@pytest.mark.parametrize("fn_maker, forward_only", [(tanh_fn, "tanh"), (layer_norm_fn, "sin")])
def test_saved_activations_backward_does_not_rerun_fn(dev, fn_maker, forward_only):
    """The backward iteration reads the forward's residuals: its program has no tanh
    (tanh's derivative reads the saved output) or sin (its derivative is cos of the
    saved input); the re-running one has."""
    import jax
    from lazyxla._jax import jax_dtype
    w = torch.randn(4, 4).to(dev).requires_grad_()
    jaxprs = {}
    for remat in (True, False):
        fn = fn_maker(w)
        scan(fn, torch.randn(2, 4).to(dev), torch.randn(3, 2, 4).to(dev), is_fn_pure=True, rematerialize=remat)
        (trace,) = scan.__globals__["_TRACES"][fn].values()
        assert (len(trace.body.residuals) > 0) is (not remat)
        inputs = [(2, 4), (2, 4), (2, 4), (2,)] + [tuple(r.shape) for r in trace.body.residuals]
        avals = [jax.ShapeDtypeStruct(s, jax.numpy.float32) for s in inputs]
        avals += [jax.ShapeDtypeStruct(n.shape, jax_dtype(n.dtype)) for n in trace.backward.extra_operands()]
        jaxprs[remat] = str(jax.make_jaxpr(trace.backward.program.fn)(*avals))
    def runs(jaxpr: str) -> bool:
        return re.search(rf"\b{forward_only}\b", jaxpr) is not None
    assert runs(jaxprs[True]) and not runs(jaxprs[False])


def test_saved_activations_replay_random_values(dev):
    x = torch.ones(4, 1000).to(dev).requires_grad_()
    _, ys = scan(lambda c, x: (c, torch.nn.functional.dropout(x, 0.5, training=True)), torch.zeros(1).to(dev), x,
                 rematerialize=False)
    ys.sum().backward()
    kept = (ys != 0).float().cpu()
    assert_close(x.grad, kept * 2.0)


def test_scan_layers_saving_activations_trains_like_the_loop(dev):
    compiles = [c for _, c in train_against_the_loop(dev, 3, is_layer_pure=True, rematerialize=False)]
    assert compiles[1:] == [0, 0], compiles


def cumsum_in_place(carry, x):
    """PyTorch/XLA's examples/scan/scan_examples.py: the carry updated in place."""
    carry += x
    return carry, carry


def product_in_place(carry, x):
    """An in-place op whose derivative reads the carry before the write (mul_ saves it)."""
    carry, total = carry
    carry *= x
    total += carry.sum()
    return (carry, total), carry


@pytest.mark.parametrize("rematerialize", [True, False])
@pytest.mark.parametrize("fn, init", [(cumsum_in_place, lambda: torch.randn(3)),
                                      (product_in_place, lambda: (torch.randn(3), torch.zeros(())))])
def test_in_place_carry_with_grad(dev, fn, init, rematerialize):
    """Placeholders requiring grad are autograd leaves, which refuse in-place ops; fn
    gets writable tensors. The loop it stands for gives each iteration its own carry
    (in eager, `carry += x` on the leaf init would raise), hence the clone below."""
    torch.manual_seed(0)
    init, xs = init(), torch.randn(5, 3)
    out = {}
    for side in ("eager", "lazy"):
        move = (lambda t: t.to(dev)) if side == "lazy" else (lambda t: t.clone())
        i, x = (torch.utils._pytree.tree_map(lambda t: move(t).requires_grad_(), v) for v in (init, xs))
        if side == "lazy":
            carry, ys = scan(fn, i, x, rematerialize=rematerialize)
        else:
            carry, ys = python_scan(lambda c, x: fn(torch.utils._pytree.tree_map(torch.clone, c), x), i, x)
        loss = sum((t ** 2).sum() for t in leaves(carry, ys))
        loss.backward()
        out[side] = [t.detach().cpu() for t in leaves(carry, ys)] + grads_of(leaves(i, x))
    for a, b in zip(out["lazy"], out["eager"]):
        assert_close(a, b, rtol=1e-4, atol=1e-5)
    if fn is cumsum_in_place:
        assert_close(out["lazy"][1], init + torch.cumsum(xs, 0))   # ys


def test_in_place_carry_without_grad_leaves_init_alone(dev):
    init, xs = torch.randn(3), torch.randn(4, 3)
    lazy_init = init.to(dev)
    carry, ys = scan(cumsum_in_place, lazy_init, xs.to(dev))
    assert_close(ys, init + torch.cumsum(xs, 0))
    assert_close(carry, init + xs.sum(0))
    assert_close(lazy_init, init)   # scan's carry is its own: init is not written
