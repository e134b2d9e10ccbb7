"""Kernels written for JAX on lazyxla, against eager PyTorch: lx.jax_op (lazy mode, CPU,
torch.compile), a Pallas kernel through lx.call_jax (interpret mode on CPU), and
scaled_dot_product_attention through jax.nn.dot_product_attention."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

import lazyxla as lx
from helpers import counter
from lazyxla.examples.pallas_kernel import pallas_silu

F = torch.nn.functional


@lx.jax_op("lxtest::gelu_scaled")
def gelu_scaled(x: torch.Tensor, scale: float) -> torch.Tensor:
    return jax.nn.gelu(x, approximate=False) * scale


@lx.jax_op("lxtest::split_norm")
def split_norm(x, idx):   # no annotations: Tensors in, one Tensor out
    return x[idx] / jnp.linalg.norm(x)


def _eager_gelu(x):
    xr = x.clone().requires_grad_()
    y = F.gelu(xr) * 2.5
    y.sum().backward()
    return y.detach(), xr.grad


def test_jax_op_in_lazy_mode_matches_eager_with_gradients(dev):
    x = torch.randn(4, 5)
    ref, ref_grad = _eager_gelu(x)
    xl = x.to(dev).requires_grad_()
    y = gelu_scaled(xl, 2.5)
    assert "call[" in lx.debug.ir_text([y])
    y.sum().backward()
    torch.testing.assert_close(y.cpu(), ref)
    torch.testing.assert_close(xl.grad.cpu(), ref_grad)


def test_jax_op_runs_on_cpu_tensors_too():
    x = torch.randn(3, 3)
    ref, ref_grad = _eager_gelu(x)
    xr = x.clone().requires_grad_()
    y = gelu_scaled(xr, 2.5)
    y.sum().backward()
    torch.testing.assert_close(y.detach(), ref)
    torch.testing.assert_close(xr.grad, ref_grad)
    idx = torch.tensor([0, 2])
    torch.testing.assert_close(split_norm(x, idx), x[idx] / x.norm())


def test_jax_op_under_torch_compile_has_no_graph_break(dev):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    @torch.compile(backend="lazyxla")
    def step(t, idx):
        return gelu_scaled(t * 2, 2.5).sum() + split_norm(t, idx).sum()

    x = torch.randn(4, 5)
    idx = torch.tensor([1, 3])
    xl = x.to(dev).requires_grad_()
    loss = step(xl, idx.to(dev))
    loss.backward()
    xr = x.clone().requires_grad_()
    ref = (F.gelu(xr * 2) * 2.5).sum() + (xr[idx] / xr.norm()).sum()
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xl.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-5)
    assert not torch._dynamo.utils.counters["graph_break"]


def test_pallas_kernel_through_call_jax_equals_eager(dev):
    x = torch.randn(16, 32)
    xl = x.to(dev).requires_grad_()
    lx.metrics.clear_all()
    y = lx.call_jax(pallas_silu, xl * 2) + 1
    y.sum().backward()
    xr = x.clone().requires_grad_()
    ref = F.silu(xr * 2) + 1
    ref.sum().backward()
    torch.testing.assert_close(y.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xl.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("is_causal,gqa", [(False, False), (True, False), (True, True)])
def test_sdpa_through_jax_equals_eager(dev, is_causal, gqa):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2 if gqa else 4, 6, 8), torch.randn(2, 2 if gqa else 4, 6, 8)
    eager = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*eager, is_causal=is_causal, scale=0.4, enable_gqa=gqa)
    ref.sum().backward()
    lazy = [t.to(dev).requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*lazy, is_causal=is_causal, scale=0.4, enable_gqa=gqa)
    assert "call[sdpa]" in lx.debug.ir_text([out])
    out.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(lazy, eager):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)


def test_sdpa_keeps_math_where_a_mask_or_dropout_needs_it(dev):
    torch.manual_seed(1)
    q = torch.randn(1, 2, 4, 8)
    mask = torch.tensor([[True, False, True, True]]).expand(4, 4)
    out = F.scaled_dot_product_attention(q.to(dev), q.to(dev), q.to(dev), attn_mask=mask.to(dev))
    assert "call[" not in lx.debug.ir_text([out])
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, q, q, attn_mask=mask))
    out64 = F.scaled_dot_product_attention(*(q.double().to(dev),) * 3)
    assert "call[" not in lx.debug.ir_text([out64])


def test_sdpa_training_steps_compile_once(dev):
    torch.manual_seed(0)
    attn = torch.nn.MultiheadAttention(8, 2, batch_first=True).to(dev)
    opt = torch.optim.SGD(attn.parameters(), lr=0.1)
    x = torch.randn(2, 5, 8).to(dev)
    compiles = []
    for _ in range(3):
        opt.zero_grad()
        y, _ = attn(x, x, x, need_weights=False, is_causal=False)
        assert "call[sdpa]" in lx.debug.ir_text([y])
        y.sum().backward()
        opt.step()
        lx.sync()
        compiles.append(counter("UncachedCompile"))
    assert compiles[1:] == [compiles[0]] * 2
