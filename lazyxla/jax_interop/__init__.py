"""JAX inside PyTorch: `call_jax`, `to_jax` / `from_jax`, `jax_op` (README.md and docs/design.md,
"JAX inside PyTorch"),
and `scaled_dot_product_attention` through `jax.nn.dot_product_attention` (attention.py)."""
from . import attention
from .buffers import from_jax, to_jax
from .call import call_jax
from .op import jax_op

attention.register()

__all__ = ["call_jax", "to_jax", "from_jax", "jax_op"]
