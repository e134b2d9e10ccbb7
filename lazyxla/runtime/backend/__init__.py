"""What differs per platform, in one place: one backend object per JAX platform.

`prepare_at_import` runs at `import lazyxla`, before JAX's backend starts (the CPU heap
tuning needs that moment); `current()` is the running platform's backend, chosen and
started at the first device use. Other modules ask the backend, never JAX or the
environment, which platform runs and what to do about it (docs/design.md, "Backends").
"""
from __future__ import annotations

from typing import Optional

from ... import config
from .accelerators import GpuBackend, TpuBackend
from .base import Backend
from .cpu import CpuBackend
from .platforms import expected_platform, running_platform

_BACKENDS: dict[str, type[Backend]] = {"cpu": CpuBackend, "tpu": TpuBackend, "gpu": GpuBackend}


class _Current:
    backend: Optional[Backend] = None


_CURRENT = _Current()


def prepare_at_import() -> None:
    if expected_platform() == "cpu":
        CpuBackend.prepare_at_import()


def current() -> Backend:
    """The running platform's backend (chosen and started on first use)."""
    backend = _CURRENT.backend
    return backend if backend is not None else select(running_platform())


def started() -> bool:
    """Whether the running platform's backend has been chosen (JAX's backend has started)."""
    return _CURRENT.backend is not None


def select(platform: str) -> Backend:
    """Make `platform`'s backend the current one and start it (tests run every backend's
    policy code on CPU this way)."""
    backend = _BACKENDS.get(platform, Backend)()
    backend.platform = platform   # another PJRT plugin: the shared defaults under its own name
    backend.start()
    _CURRENT.backend = backend
    return backend


def setting(name: str) -> int:
    """A policy the user may set (config field `name`, LAZYXLA_<NAME>), else the backend's."""
    value = getattr(config.SETTINGS, name)
    return value if value is not None else getattr(current(), name)


def platform() -> str:
    """"cpu", "gpu" or "tpu": the platform lazyxla runs on."""
    return current().platform


__all__ = ["Backend", "CpuBackend", "GpuBackend", "TpuBackend", "current", "expected_platform",
           "platform", "prepare_at_import", "select", "setting", "started"]
