"""The lazy IR: one immutable node type."""
from .node import Node, DATA, SCALAR, GETITEM  # noqa: F401
