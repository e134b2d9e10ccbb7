"""torch_xla's JAX names under lazyxla.compat: xb.call_jax, the op builder (xb.Op,
xor.register: upstream test_operations.py's TestOpBuilder and TestDataType cases) and
custom_kernel's flash_attention, gmm and repeat_with_fixed_output_size, against eager."""
from __future__ import annotations

import jax.numpy as jnp
import pytest
import torch

import lazyxla as lx
from helpers import counter, matmul_tolerance


def _run_op(torch_xla, name, tensors, opfn, aten_fn=None, **kwargs):
    import torch_xla.core.xla_op_registry as xor
    op = xor.register(name, opfn)
    dev = torch_xla.device()
    expected = (aten_fn or opfn)(*tensors, **kwargs)
    got = op(*[t.to(dev) for t in tensors], **kwargs)
    return got, expected


def test_call_jax_under_the_torch_xla_name(torch_xla):
    import torch_xla.core.xla_builder as xb

    def f(a, b):
        return a + jnp.sin(b)

    a = torch.ones((3, 3), device="xla")
    lx.metrics.clear_all()
    b = xb.call_jax(f, (a, a))
    c = xb.call_jax(f, (a,), {"b": a}, name="f")
    assert counter("ExecuteComputation") == 0
    torch.testing.assert_close(b.cpu(), torch.sin(torch.ones(3, 3)) + 1)
    torch.testing.assert_close(c.cpu(), b.cpu())


def test_op_builder_add_mul_and_mixed_dtype_tuple(torch_xla):
    import torch_xla.core.xla_builder as xb
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    got, expected = _run_op(torch_xla, "t_add", [x, y], lambda a, b, **kw: a + b)
    torch.testing.assert_close(got.cpu(), expected)
    got, expected = _run_op(torch_xla, "t_mul", [x, y], lambda a, b, **kw: a * b)
    torch.testing.assert_close(got.cpu(), expected)

    import torch_xla.core.xla_op_registry as xor
    op = xor.register("t_tuple", lambda a: xb.Op.tuple((a, a.cast(xb.Type.BF16))))
    a, a_cast = op(x.to(torch_xla.device()))
    assert a.dtype == torch.float32 and a_cast.dtype == torch.bfloat16
    torch.testing.assert_close(a_cast.cpu(), x.bfloat16())


@pytest.mark.parametrize("k0", [0.1, 0.9])
def test_op_builder_conditional(torch_xla, k0):
    import torch_xla.core.xla_builder as xb

    def op_fn(k, a, b, k0=None):
        cond = k > xb.Op.scalar(k.builder(), k0, dtype=k.shape().dtype)
        return cond.mkconditional((a, b), lambda a, b: a + b, lambda a, b: a - b)

    k, a, b = torch.tensor(0.2), torch.randn(2, 2), torch.randn(2, 2)
    got, expected = _run_op(torch_xla, "t_cond", [k, a, b], op_fn,
                            lambda k, a, b, k0=None: a + b if k.item() > k0 else a - b, k0=k0)
    torch.testing.assert_close(got.cpu(), expected)


def test_op_builder_while_and_triangular_solve(torch_xla):
    import torch_xla.core.xla_builder as xb

    def op_fn(a, b, limit=None):
        def cond(counter, a, b):
            return counter < xb.Op.scalar(counter.builder(), limit, dtype=xb.Type.S32)

        def body(counter, a, b):
            return xb.Op.tuple((counter + xb.Op.scalar(counter.builder(), 1, dtype=xb.Type.S32), a + b, b))

        zero = xb.Op.scalar(a.builder(), 0, dtype=xb.Type.S32)
        return xb.Op.mkwhile((zero, a, b), cond, body).get_tuple_element(1)

    a, b = torch.randn(2, 2), torch.randn(2, 2)
    got, _ = _run_op(torch_xla, "t_while", [a, b], op_fn, lambda a, b, limit=None: a, limit=10)
    torch.testing.assert_close(got.cpu(), a + 10 * b)

    def solve(b, A, lower, unit_diagonal, transpose_a):
        return A.triangualr_solve(b, True, lower, unit_diagonal, transpose_a)

    b, A = torch.randn(2, 3), torch.randn(2, 2).triu() + 3 * torch.eye(2)
    got, _ = _run_op(torch_xla, "t_solve", [b, A], solve, lambda *a, **k: None,
                     lower=False, unit_diagonal=False, transpose_a=False)
    want = torch.linalg.solve_triangular(A, b, upper=True)
    torch.testing.assert_close(got.cpu(), want, **matmul_tolerance(want, rtol=1e-5, atol=1e-5))


def test_op_builder_types_and_unmapped_methods(torch_xla):
    import torch_xla.core.xla_builder as xb
    from lazyxla.compat import UnsupportedError
    for xla_type in xb._XLA_PT_TYPE_MAP:
        assert xla_type == xb.Op.from_torch_type(xb.Op.to_torch_type(xla_type))
    with pytest.raises(UnsupportedError, match=r"xla_builder\.Op\.conv"):
        xb.Op(jnp.zeros(2)).conv


def test_custom_kernel_flash_attention_equals_eager(torch_xla):
    from torch_xla.experimental.custom_kernel import flash_attention
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 4) for _ in range(3))
    dev = torch_xla.device()
    ql = q.to(dev).requires_grad_()
    out = flash_attention(ql, k.to(dev), v.to(dev), causal=True, sm_scale=0.5)
    ref = torch.nn.functional.scaled_dot_product_attention(q.clone().requires_grad_(), k, v, is_causal=True,
                                                           scale=0.5)
    # the kernels are JAX code: their products run at JAX's default precision (bf16 passes on a TPU)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), **matmul_tolerance(ref, rtol=1e-5, atol=1e-6))
    out.sum().backward()
    qr = q.clone().requires_grad_()
    torch.nn.functional.scaled_dot_product_attention(qr, k, v, is_causal=True, scale=0.5).sum().backward()
    torch.testing.assert_close(ql.grad.cpu(), qr.grad, **matmul_tolerance(qr.grad, rtol=1e-5, atol=1e-5))
    seg = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]] * 2)
    out = flash_attention(q.to(dev), k.to(dev), v.to(dev), False, seg.to(dev), seg.to(dev), 0.5)
    mask = (seg[:, None, :, None] == seg[:, None, None, :])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5)
    torch.testing.assert_close(out.cpu(), ref, **matmul_tolerance(ref, rtol=1e-5, atol=1e-6))


def test_custom_kernel_gmm_and_repeat(torch_xla):
    from torch_xla.experimental.custom_kernel import gmm, repeat_with_fixed_output_size
    dev = torch_xla.device()
    lhs, rhs = torch.randn(6, 3), torch.randn(2, 3, 4)
    sizes = torch.tensor([2, 4], dtype=torch.int32)
    expected = torch.cat([lhs[:2] @ rhs[0], lhs[2:] @ rhs[1]])
    torch.testing.assert_close(gmm(lhs.to(dev), rhs.to(dev), sizes.to(dev)).cpu(), expected,
                               **matmul_tolerance(expected, rtol=1e-5, atol=1e-5))

    lx.metrics.clear_all()
    x = torch.randn(10)
    repeats = torch.tensor([0, 5, 2, 0, 4, 9, 6, 7, 8, 0])
    res = repeat_with_fixed_output_size(x.to(dev), repeats.to(dev), 100)
    base = torch.repeat_interleave(x, repeats)
    expected = torch.cat((base, x[-1].repeat(100 - base.shape[0])))
    torch.testing.assert_close(res.cpu(), expected)
    res = repeat_with_fixed_output_size(x.to(dev), repeats.to(dev), 20)
    torch.testing.assert_close(res.cpu(), base[:20])
    assert not [n for n in lx.metrics.counter_names() if n.startswith("aten::")]
