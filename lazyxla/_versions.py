"""Release checks shared by the torch and JAX compat modules (frontend/torch_compat.py,
_jax.py): each names the range it was verified with and warns, once, outside it.
A warning, not an error: a newer release often works, and `scripts/test_matrix.sh`
tells in minutes whether it does."""
from __future__ import annotations

import warnings

Minor = tuple[int, int]

# First and last minor release of torch and of JAX the test matrix verified (pyproject's pins
# say the same; tests/test_torch_compat.py checks): frontend/torch_compat.py, _jax.py and
# the patches' version guards (lazyxla/patches) use them.
TORCH_VERIFIED: tuple[Minor, Minor] = ((2, 11), (2, 15))
JAX_VERIFIED: tuple[Minor, Minor] = ((0, 10), (0, 10))

# lazyxla's own release: lx.__version__, and part of the persistent compile cache's key.
LAZYXLA_VERSION = "0.1.0"


def minor(version: str) -> Minor:
    """(major, minor) of a version string: "2.15.0+cu132" -> (2, 15), "0.11.0" -> (0, 11)."""
    major, minor_, *_ = version.split("+")[0].split(".")
    return int(major), int(minor_)


def warn_if_unverified(package: str, version: str, verified: tuple[Minor, Minor], why: str) -> bool:
    """Warn when `version` lies outside `verified` (first, last minor release); True if it does."""
    if verified[0] <= minor(version) <= verified[1]:
        return False
    lo, hi = (".".join(map(str, v)) for v in verified)
    warnings.warn(
        f"lazyxla: {package} {version} is outside the range lazyxla was verified with ({lo} to {hi}); "
        f"{why} Run `scripts/test_matrix.sh` with this release to check it, or install a {package} "
        f"between {lo} and {hi}.", stacklevel=3)
    return True
