"""From a collected graph to a compiled XLA executable (through jax.jit)."""
