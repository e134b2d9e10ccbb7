"""The process heap as device memory: glibc malloc settings and trimming.

On the CPU backend every XLA buffer is a block of the process heap, and a training
step frees and allocates blocks of the same sizes every step. `tune` sets glibc's
M_MMAP_THRESHOLD (32 MiB), M_TRIM_THRESHOLD (256 MiB) and M_TOP_PAD (64 MiB) together
(`mallopt`), so freed blocks stay in the heap for the next step instead of going back
to the OS and being faulted in again; the heap may thus stay well above what is live,
and `release_free_heap` gives that back after each compile. Tuned, `compiler_options()`
has XLA:CPU split an executable's temporaries into blocks of at most XLA_HEAP_LIMIT, which
the heap keeps (LAZYXLA_SPLIT_TEMPORARIES=0: one block, and graphs with more than that in
temporaries stay in the persistent compile cache). LAZYXLA_HEAP_TUNING=0 keeps
glibc's defaults, and so does any platform but CPU; where glibc is not the C library
(musl, macOS) both functions do nothing.

Design: docs/design.md, "runtime/host_heap.py".
"""
from __future__ import annotations

import ctypes
from typing import Optional

_M_TRIM_THRESHOLD = -1   # glibc's <malloc.h> parameter numbers
_M_MMAP_THRESHOLD = -3
_M_TOP_PAD = -2
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 256 * 2**20
TOP_PAD = 64 * 2**20
XLA_HEAP_LIMIT = 16 * 2**20   # XLA's temporaries in blocks below MMAP_THRESHOLD
_tuned = False   # tune() took: compile with XLA_HEAP_LIMIT


def _load_glibc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018  (AttributeError where this is not glibc)
        libc.malloc_trim  # noqa: B018
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_glibc()


def tune(platform: str, enabled: bool = True) -> bool:
    """Keep freed buffers in the heap for reuse; True when the settings took.

    `enabled` is the caller's LAZYXLA_HEAP_TUNING (this module reads no settings, so the
    tests can load it alone, without importing torch or JAX).

    `platform` is lazyxla's JAX platform (`lx.platform()`). Only on "cpu" are device
    buffers heap blocks; on a GPU or TPU they live in the device allocator, and the
    settings would only make the host heap keep more memory for nothing, so they are
    not applied there (`release_free_heap` still applies: compiles run on the host)."""
    global _tuned
    if _LIBC is None or not enabled or platform != "cpu":
        _tuned = False
        return False
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                (_M_TOP_PAD, TOP_PAD))
    _tuned = all([_LIBC.mallopt(param, value) == 1 for param, value in settings])
    return _tuned


def compiler_options(split: bool = True) -> dict:
    """XLA options that keep an executable's temporaries in the tuned heap: blocks of
    at most XLA_HEAP_LIMIT instead of one (see the module's notes); {} untuned or
    when `split` (the caller's LAZYXLA_SPLIT_TEMPORARIES) is off."""
    return {"xla_multiheap_size_constraint_per_heap": XLA_HEAP_LIMIT} if _tuned and split else {}


def release_free_heap() -> None:
    """Hand freed heap memory back to the OS (after a compile: XLA's compile of
    a training step frees hundreds of MB of scratch; without this it stays in
    the resident set for the whole run, measured W2 1065 MB -> 696 MB)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)

