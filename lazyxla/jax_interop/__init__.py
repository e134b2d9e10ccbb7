"""JAX inside PyTorch: `call_jax`, `to_jax` / `from_jax`, `jax_op` (API.md "JAX interop")."""
from .buffers import from_jax, to_jax
from .call import call_jax
from .op import jax_op

__all__ = ["call_jax", "to_jax", "from_jax", "jax_op"]
