"""The one list of OpInfo entries (op_db names, `name.variant`) and ATen ops that
tests/ops/test_opinfo.py treats specially, each with its reason."""
from __future__ import annotations

# The reason complex64 failures are expected until the `complex` branch lands: the harness
# xfails (strict=False) a complex sample exactly when lazyxla refuses complex tensors.
COMPLEX_PENDING_REASON = "complex dtypes: branch complex"

# Random or uninitialised results: compared by shape and dtype only (as torchax does).
_UNINITIALISED = "uninitialised memory: only shape and dtype are defined"
_RANDOM = "random: lazyxla draws with JAX's generator (seeded from torch's), not eager's mt19937"
SHAPE_ONLY: dict = {
    **{name: _UNINITIALISED for name in (
        "empty", "empty_like", "new_empty", "new_empty_strided", "empty_permuted", "empty_strided")},
    **{name: _RANDOM for name in (
        "bernoulli",
        "cauchy",
        "exponential",
        "geometric",
        "log_normal",
        "nn.functional.alpha_dropout",
        "nn.functional.dropout",
        "nn.functional.dropout2d",
        "nn.functional.dropout3d",
        "nn.functional.feature_alpha_dropout.with_train",
        "normal",
        "normal.in_place",
        "rand_like",
        "randint",
        "randint_like",
        "randn",
        "randn_like",
        "uniform", "normal.number_mean", "multinomial", "nn.functional.rrelu",
        "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d")},
}
# Entries of which only some samples are random: entry -> predicate on the sample.
SHAPE_ONLY_SAMPLES: dict = {
    "nn.functional.scaled_dot_product_attention": lambda s: s.kwargs.get("dropout_p", 0) > 0,  # dropout
}

# (values, indices) results where eager picks the index among equal values by its CPU
# kernel's unstable selection (std::nth_element / std::sort; PyTorch documents the
# index as device-specific): values compared exactly, indices checked to point at an
# element equal to the value. Maps the entry to (position of `dim` among the op's
# arguments after the input, its default).
INDEX_TIES: dict = {"kthvalue": (1, -1), "mode": (0, -1), "topk": (1, -1)}

# Entries whose tensor arguments other than the input stay on the CPU, as eager requires
# on any device (the sample is otherwise moved to lazyxla as a whole).
CPU_ARGS: dict = {"tensor_split": "indices_or_sections as a tensor must be a CPU tensor"}

# Wider tolerances than atol 1e-3 / rtol 1e-5, per entry: (atol, rtol).
_EXPM = (1e-1, 1e-3)  # float32 expm of entries up to ~1e5: JAX's Pade-13 vs eager's Taylor-18
TOLERANCES: dict = {"matrix_exp": _EXPM, "linalg.matrix_exp": _EXPM}

# ATen ops allowed to run through the host fallback (counted, not failures): reason.
HOST_OPS: dict = {}

# Entries not run at all: name -> reason.
_SPARSE = "sparse layouts: lazyxla tensors are strided only"
SKIPS: dict = {"sparse.sampled_addmm": _SPARSE, "to_sparse": _SPARSE}
