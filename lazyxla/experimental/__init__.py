"""Experimental APIs (API.md "Gradient accumulation"): names follow
`torch_xla.experimental`; behaviour may still change."""
from __future__ import annotations

from ..sync.capture import InputMutationError
from .gradient_accumulation import gradient_accumulation

__all__ = ["gradient_accumulation", "InputMutationError"]
