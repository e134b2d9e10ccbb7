"""Lowering rules: IR op -> JAX, split by op family.

Importing this package registers every rule in its op record (ir/ops.py, through registry.py).
"""
from . import registry  # noqa: F401
