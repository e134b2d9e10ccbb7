"""JAX configuration owned by lazyxla.

lazyxla needs JAX's 64-bit mode so that int64 (PyTorch's default integer type)
and float64 survive the round trip. JAX reads this flag globally, so importing
lazyxla turns it on for the whole process; we never rely on JAX's default
dtypes and always pass explicit dtypes in lowerings, so other JAX code in the
same process keeps working (it just sees 64-bit defaults).

It is also where JAX's differences across releases are handled (the torch side
has frontend/torch_compat.py). Verified: jax/jaxlib 0.10 (scripts/test_matrix.sh,
docs/compat-matrix.md). JAX 0.11 was checked against its source and changelog
only, since it needs Python >= 3.12 and the machines that built this run 3.11:
every JAX name lazyxla calls (the `jax.config` options set here, the `lax` and
`jax.numpy` functions of lower/, `jit(...).lower().compile()`,
`Compiled.memory_analysis`, `Array.delete/is_deleted`) exists unchanged in
jax-v0.11.0; its breaking changes (uninitialised `jnp.empty`, removed
`jax.core`/`pxla` names, `jax.cloud_tpu_init`) touch nothing lazyxla uses. So no
JAX release needs code of its own yet, and 0.11 stays outside the pin until a run
of the suite on it passes.
"""
from __future__ import annotations

import functools
import os

import jax

from ._versions import warn_if_unverified

# First and last JAX minor release the test matrix verified (pyproject's pin says the same).
VERIFIED = ((0, 10), (0, 10))


def check_version() -> bool:
    """Warn (True) when the running JAX is outside the verified range."""
    return warn_if_unverified("jax", jax.__version__, VERIFIED,
                              "lowerings and compile steps may meet changed JAX behaviour.")


jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402  (must come after the x64 switch)
import numpy as np  # noqa: E402
import torch  # noqa: E402

TORCH_TO_JAX = {
    torch.float32: jnp.float32,
    torch.float64: jnp.float64,
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.int64: jnp.int64,
    torch.int32: jnp.int32,
    torch.int16: jnp.int16,
    torch.int8: jnp.int8,
    torch.uint8: jnp.uint8,
    # torch.uint16/32/64 are "shell" dtypes in eager (few kernels); uint64 is in the
    # OpInfo samples and XLA has it under x64, so what eager runs, lazyxla runs too.
    torch.uint64: jnp.uint64,
    torch.bool: jnp.bool_,
    # complex128 needs JAX's x64 mode, which lazyxla always enables (above).
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
}
JAX_TO_TORCH = {np.dtype(v): k for k, v in TORCH_TO_JAX.items()}


def jax_dtype(dtype: torch.dtype):
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise TypeError(
            f"lazyxla: dtype {dtype} is not supported on the lazyxla device; "
            f"supported dtypes are {', '.join(str(d) for d in TORCH_TO_JAX)}. "
            "Convert the tensor first, e.g. t.to(torch.float32)."
        ) from None


def torch_dtype(dtype) -> torch.dtype:
    return JAX_TO_TORCH[np.dtype(dtype)]


def jax_devices() -> list:
    return jax.local_devices()


@functools.lru_cache(maxsize=None)
def device_memory_bytes(index: int) -> int:
    """Total memory of local device `index`: the allocator's limit where the backend
    reports one (GPU, TPU), else the host's physical memory (XLA:CPU buffers are
    host heap)."""
    stats = jax_devices()[index].memory_stats() or {}
    limit = stats.get("bytes_limit")
    if limit:
        return int(limit)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
