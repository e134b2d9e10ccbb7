"""The one list of OpInfo entries (op_db names, `name.variant`) and ATen ops that
tests/ops/test_opinfo.py treats specially, each with its reason."""
from __future__ import annotations

# The reason complex64 failures are expected until the `complex` branch lands: the harness
# xfails (strict=False) a complex sample exactly when lazyxla refuses complex tensors.
COMPLEX_PENDING_REASON = "complex dtypes: branch complex"

# Random or uninitialised results: compared by shape and dtype only (as torchax does).
SHAPE_ONLY: dict = {}

# (values, indices) results where eager picks the index among equal values by its CPU
# kernel's unstable selection (std::nth_element / std::sort; PyTorch documents the
# index as device-specific): values compared exactly, indices checked to point at an
# element equal to the value. Maps the entry to (position of `dim` among the op's
# arguments after the input, its default).
INDEX_TIES: dict = {"kthvalue": (1, -1), "mode": (0, -1)}

# Wider tolerances than atol 1e-3 / rtol 1e-5, per entry: (atol, rtol).
_EXPM = (1e-1, 1e-3)  # float32 expm of entries up to ~1e5: JAX's Pade-13 vs eager's Taylor-18
TOLERANCES: dict = {"matrix_exp": _EXPM, "linalg.matrix_exp": _EXPM}

# ATen ops allowed to run through the host fallback (counted, not failures): reason.
HOST_OPS: dict = {}

# Entries not run at all: name -> reason.
SKIPS: dict = {}
