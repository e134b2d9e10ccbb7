"""Lowering rules: IR op -> JAX, split by op family.

Importing this package registers every rule in `registry.LOWERINGS`.
"""
from . import registry  # noqa: F401
