"""JAX inside PyTorch: `call_jax`, `to_jax` / `from_jax`, `jax_op` (API.md "JAX interop")."""
from .buffers import from_jax, to_jax
from .call import call_jax

__all__ = ["call_jax", "to_jax", "from_jax"]
