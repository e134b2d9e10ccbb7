"""Which JAX platform lazyxla runs on: the one place that asks.

`expected_platform` answers before JAX's backend starts (at `import lazyxla`, when only the
environment and the installed plugins can say); `running_platform` once it runs, from the
first local device.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import jax

# Accelerator PJRT plugins JAX would pick over CPU (jax._src.xla_bridge discovers them the same
# ways: the `jax_plugins` entry points and namespace package, and libtpu for TPUs).
_ACCELERATOR_MODULES = ("libtpu", "jax_plugins")
# JAX's device platform names -> lazyxla's (lx.platform())
_NAMES = {"cuda": "gpu", "rocm": "gpu"}


def expected_platform() -> str:
    """The platform JAX will start, asked without starting it: JAX_PLATFORMS's first entry
    when set, else "accelerator" where an accelerator plugin is installed, else "cpu"."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms:
        first = platforms.split(",")[0].strip().lower()
        return _NAMES.get(first, first)
    if any(importlib.util.find_spec(name) is not None for name in _ACCELERATOR_MODULES):
        return "accelerator"
    return "accelerator" if importlib.metadata.entry_points(group="jax_plugins") else "cpu"


def running_platform() -> str:
    """The platform of JAX's first local device: "cpu", "gpu" or "tpu" (starts JAX's backend)."""
    name = jax.local_devices()[0].platform
    return _NAMES.get(name, name)
