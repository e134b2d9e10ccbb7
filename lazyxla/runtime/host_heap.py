"""The process heap as device memory: glibc malloc settings and trimming.

On the CPU backend every XLA buffer is a block of the process heap. Each step
of a training loop frees the previous step's gradients (`zero_grad`) and
allocates new ones of the same sizes as outputs of the step graph. glibc's
defaults return such blocks to the OS as soon as they are freed: a block
above the 128 KiB mmap threshold is unmapped, and freed space at the top of a
heap above the trim threshold is given back. Every step then page-faults its
outputs in afresh. Measured on W1 mlp (22 MB of gradients per step): 4,600
minor faults and +4 ms per 29 ms step, which put lazyxla at 1.2-1.3x the JAX
limit, where nothing new is allocated because all state is donated.

Options weighed:
- a buffer pool of our own that donates dead buffers to the next graph as
  scratch inputs: exact, but changes the graph's parameters (and so its key)
  whenever the pool does, and duplicates what the allocator is for;
- LD_PRELOAD of jemalloc/tcmalloc: must happen before the interpreter
  starts, so a library cannot do it for its users;
- `mallopt` at import (chosen): blocks up to 32 MiB (glibc's upper bound for
  M_MMAP_THRESHOLD) come from the heap, and up to 256 MiB of freed heap top
  is kept for reuse instead of being trimmed. Result: 0-1 faults per step.
  Setting these disables glibc's dynamic threshold, so both must be set
  together (the trim threshold alone falls back to a 128 KiB mmap threshold
  and makes things 5x worse). One arena for all threads (M_ARENA_MAX=1):
  XLA's worker threads otherwise allocate from per-thread arenas whose
  secondary heaps glibc deletes whenever they fall empty, whatever the trim
  threshold; with them, 1 run in 4 still faulted every step.

The heap may thus stay up to 256 MiB above what is live; `release_free_heap`
gives it back after each compile (XLA's compiler scratch is the big one).
LAZYXLA_HEAP_TUNING=0 keeps glibc's defaults. Where glibc is not the C
library (musl, macOS) both functions do nothing.
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional

_M_TRIM_THRESHOLD = -1   # glibc's <malloc.h> parameter numbers
_M_MMAP_THRESHOLD = -3
_M_TOP_PAD = -2
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 256 * 2**20
TOP_PAD = 64 * 2**20


def _load_glibc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018  (AttributeError where this is not glibc)
        libc.malloc_trim  # noqa: B018
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_glibc()


def tuning_enabled() -> bool:
    return os.environ.get("LAZYXLA_HEAP_TUNING", "1") not in ("0", "")


def tune() -> bool:
    """Keep freed buffers in the heap for reuse; True when the settings took."""
    if _LIBC is None or not tuning_enabled():
        return False
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                (_M_TOP_PAD, TOP_PAD))
    return all([_LIBC.mallopt(param, value) == 1 for param, value in settings])


def release_free_heap() -> None:
    """Hand freed heap memory back to the OS (after a compile: XLA's compile of
    a training step frees hundreds of MB of scratch; without this it stays in
    the resident set for the whole run, measured W2 1065 MB -> 696 MB)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)

