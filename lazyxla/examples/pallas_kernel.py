"""A Pallas kernel on lazyxla tensors: SiLU over row blocks, with a custom VJP.

Run it: `python -m lazyxla.examples.pallas_kernel`. The kernel is written once for
JAX (`pl.pallas_call`); `lx.call_jax` records it into the lazy graph beside the
torch ops, so it compiles into the step's executable. On CPU Pallas runs in
interpret mode (the kernel's JAX semantics, no Mosaic/Triton); on GPU and TPU it
compiles to a real kernel. The backward is plain JAX, attached with
`jax.custom_vjp`, so torch autograd reaches it through `jax.vjp`.
"""
from __future__ import annotations


import jax
import torch
from jax.experimental import pallas as pl

import lazyxla as lx


def _silu_kernel(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = x * jax.nn.sigmoid(x)


def _rows_per_block(n: int) -> int:
    return next(b for b in (8, 4, 2, 1) if n % b == 0)


def silu_forward(x: jax.Array) -> jax.Array:
    """SiLU of a 2-D array by a Pallas kernel, one grid step per block of rows."""
    rows = _rows_per_block(x.shape[0])
    spec = pl.BlockSpec((rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(_silu_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // rows,), in_specs=[spec], out_specs=spec,
                          interpret=jax.default_backend() == "cpu")(x)   # Mosaic/Triton only on the chip


@jax.custom_vjp
def pallas_silu(x: jax.Array) -> jax.Array:
    return silu_forward(x)


def _fwd(x):
    return silu_forward(x), x


def _bwd(x, g):
    s = jax.nn.sigmoid(x)
    return (g * s * (1 + x * (1 - s)),)


pallas_silu.defvjp(_fwd, _bwd)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 32)
    xl = x.to(lx.device()).requires_grad_()
    y = lx.call_jax(pallas_silu, xl * 2)
    y.sum().backward()
    xr = x.clone().requires_grad_()
    ref = torch.nn.functional.silu(xr * 2)
    ref.sum().backward()
    print("max |lazyxla - eager|:", (y.detach().cpu() - ref.detach()).abs().max().item(),
          "grad:", (xl.grad.cpu() - xr.grad).abs().max().item())


if __name__ == "__main__":
    main()
