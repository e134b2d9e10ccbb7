"""The torch <-> JAX dtype map, lazyxla's JAX devices, and JAX's release differences.

lazyxla needs JAX's 64-bit mode so that int64 (PyTorch's default integer type) and
float64 survive the round trip. It is switched on only around lazyxla's own transfers,
compiles, executions and host reads (`patches.in_x64()`), never for the whole process, so
a user's JAX code keeps JAX's 32-bit defaults; lowerings always pass explicit dtypes.

This module is also where JAX's differences across releases are handled (the torch side
has frontend/torch_compat.py). Verified: jax/jaxlib 0.10 (scripts/test_matrix.sh,
docs/compat-matrix.md); no JAX release needs code of its own yet.

Design: docs/design.md, "torch and JAX releases" and "_jax.py".
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import torch

from ._versions import JAX_VERIFIED as VERIFIED
from ._versions import warn_if_unverified


def check_version() -> bool:
    """Warn (True) when the running JAX is outside the verified range."""
    return warn_if_unverified("jax", jax.__version__, VERIFIED,
                              "lowerings and compile steps may meet changed JAX behaviour.")


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
    torch.uint32: jnp.uint32,   # also uint64's storage under a 32-bit policy (runtime/storage_dtypes.py)
    torch.bool: jnp.bool_,
    # complex128 needs JAX's x64 mode, which lazyxla's entry points enable (patches.in_x64).
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
    # an array's dtype is an np.dtype already (one dict hit for every graph output);
    # a JAX scalar type (jnp.float32) is converted first
    found = JAX_TO_TORCH.get(dtype)
    return found if found is not None else JAX_TO_TORCH[np.dtype(dtype)]


def jax_devices() -> list:
    return jax.local_devices()
