"""Experimental APIs (README.md, "Gradient accumulation", "Loops over layers: scan"): names follow
`torch_xla.experimental`; behaviour may still change."""
from __future__ import annotations

from ..capture import InputMutationError
from .eager import eager_mode, eager_mode_context, is_eager_mode
from .gradient_accumulation import gradient_accumulation
from .scan import ScanError, scan
from .scanned_layers import ScannedLayers, scan_layers
from .while_loop import WhileLoopError, fori_loop, while_loop

__all__ = ["eager_mode", "eager_mode_context", "is_eager_mode", "gradient_accumulation", "InputMutationError", "scan", "scan_layers", "ScannedLayers", "ScanError",
           "while_loop", "fori_loop", "WhileLoopError"]
