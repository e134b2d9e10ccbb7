"""The CPU backend's heap: glibc malloc settings and trimming (runtime/backend/cpu.py uses it).

On the CPU backend every XLA buffer is a block of the process heap, and a training
step frees and allocates blocks of the same sizes every step. The settings here keep
freed blocks in the heap for the next step instead of giving them back to the OS to be
faulted in again; the heap may thus stay well above what is live, and
`release_free_heap` gives that back after each compile. Two ways, in order:

* `tune_at_import` (`import lazyxla`, before JAX starts its backend, when the CPU backend
  is expected), when the process has one malloc arena so far: every thread allocates from
  the main heap (M_ARENA_MAX 1, M_MMAP_MAX 0) and it is never trimmed by itself, so
  blocks of any size are kept (mode ONE_HEAP); `after_step` gives back the free pages
  when a step made the heap grow (fragmentation).
* otherwise `tune` at the first device use on CPU: M_MMAP_THRESHOLD 32 MiB,
  M_TRIM_THRESHOLD 256 MiB, M_TOP_PAD 64 MiB, and `compiler_options()` has XLA:CPU split
  an executable's temporaries into blocks of at most XLA_HEAP_LIMIT (mode SPLIT;
  LAZYXLA_SPLIT_TEMPORARIES=0: one block, and graphs with more than that in temporaries
  stay in the persistent compile cache).

LAZYXLA_HEAP_TUNING=0 keeps glibc's defaults, and so does any platform but CPU (its backend
calls `undo_import_tuning`); where glibc is not the C library (musl, macOS) every function here
does nothing. The module imports nothing of lazyxla, torch or JAX, so tests can load it alone.

Design: docs/design.md, "runtime/backend/host_heap.py".
"""
from __future__ import annotations

import ctypes
from typing import Optional

_M_TRIM_THRESHOLD = -1   # glibc's <malloc.h> parameter numbers
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 256 * 2**20
TOP_PAD = 64 * 2**20
NEVER_TRIM = 2**31 - 1        # mallopt takes an int: the largest trim threshold there is
XLA_HEAP_LIMIT = 16 * 2**20   # XLA's temporaries in blocks below MMAP_THRESHOLD
# glibc's default values of what tune_at_import sets, set back when the platform turns out not
# to be CPU after all (or the tuning is switched off)
_DEFAULTS = ((_M_MMAP_MAX, 65536), (_M_TRIM_THRESHOLD, 128 * 2**10), (_M_TOP_PAD, 128 * 2**10),
             (_M_ARENA_MAX, 0))
ONE_HEAP, SPLIT = "one heap", "split"


class _Heap:
    """Which tuning took (None, ONE_HEAP or SPLIT): compile options follow it; in ONE_HEAP,
    the heap's size and its break at the last step barrier."""
    mode: Optional[str] = None
    size: int = 0
    brk: Optional[int] = None


HEAP = _Heap()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _load_glibc() -> Optional[ctypes.CDLL]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018  (AttributeError where this is not glibc)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_ssize_t]
    if hasattr(libc, "mallinfo2"):   # glibc 2.33+
        libc.mallinfo2.restype = _Mallinfo2
    return libc


_LIBC = _load_glibc()


def _mallopt_all(settings) -> bool:
    return all([_LIBC.mallopt(param, value) == 1 for param, value in settings])


def tune_at_import(enabled: bool = True) -> bool:
    """Mode ONE_HEAP, before JAX's backend starts, when the CPU backend is expected; True
    when it took. `enabled` is the caller's LAZYXLA_HEAP_TUNING.

    Only while the main arena is the process's one arena: glibc binds a thread to an
    arena at its first malloc and M_ARENA_MAX stops only new arenas, so threads that
    allocated earlier (and the round robin of new threads over them) would keep blocks
    outside the main heap, where M_MMAP_MAX 0 does not keep the big ones."""
    if _LIBC is None or not enabled or arena_count() != 1:
        return False
    if _mallopt_all(((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, NEVER_TRIM), (_M_TOP_PAD, TOP_PAD))):
        HEAP.mode = ONE_HEAP
        return True
    _mallopt_all(_DEFAULTS)
    return False


def arena_count() -> int:
    """The process's malloc arenas (`malloc_info`'s heaps); 0 where it cannot be read."""
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    try:
        stream = _LIBC.open_memstream(ctypes.byref(buf), ctypes.byref(size))
        if not stream:
            return 0
        _LIBC.malloc_info(0, stream)
        _LIBC.fclose(stream)
        text = ctypes.string_at(buf, size.value)
        _LIBC.free(buf)
    except AttributeError:
        return 0
    return text.count(b"<heap nr=")


def tune(enabled: bool = True) -> bool:
    """At the first device use on CPU: keep freed buffers in the heap for reuse; True when
    a tuning is in effect (ONE_HEAP from the import, or SPLIT now)."""
    if _LIBC is None or not enabled:
        undo_import_tuning()
        return False
    if HEAP.mode is ONE_HEAP:
        return True
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                (_M_TOP_PAD, TOP_PAD))
    HEAP.mode = SPLIT if _mallopt_all(settings) else None
    return HEAP.mode is not None


def undo_import_tuning() -> None:
    """Undo `tune_at_import`'s mode ONE_HEAP, if it took: the four settings it changed back
    to glibc's default values (set explicitly, so glibc's dynamic mmap threshold stays off),
    and no mode. On a GPU or TPU device buffers live in the device's allocator, and the
    settings would only make the host heap keep more memory for nothing
    (`release_free_heap` still applies there: compiles run on the host)."""
    if HEAP.mode is not None and _LIBC is not None:
        _mallopt_all(_DEFAULTS)
    HEAP.mode = None


def compiler_options(split: bool = True) -> dict:
    """XLA options that keep an executable's temporaries in the tuned heap in mode SPLIT:
    blocks of at most XLA_HEAP_LIMIT instead of one (see the module's notes); {} in the
    other modes or when `split` (the caller's LAZYXLA_SPLIT_TEMPORARIES) is off."""
    return {"xla_multiheap_size_constraint_per_heap": XLA_HEAP_LIMIT} if HEAP.mode is SPLIT and split else {}


def after_step() -> None:
    """At a step barrier in mode ONE_HEAP: when the main heap grew since the last barrier
    (a block fitted in none of its free chunks), give the pages of its free chunks back to
    the OS, keeping the top. One heap for every size fragments: without this, a step
    graph's scratch block that no longer fits a hole extends the heap and the hole stays
    resident (W2: +270 MiB over the first 400 steps). Steps without growth pay one
    `sbrk(0)`: the main heap grows by moving the program break, and `mallinfo2`, which walks
    every free chunk (0.3-0.4 ms a W2 step once the heap holds a step's freed blocks), runs
    only when the break moved. glibc maps memory for the main heap instead only where the
    break cannot move (another mapping just above it); such growth goes untrimmed: memory
    kept, never a wrong value."""
    if HEAP.mode is not ONE_HEAP or not hasattr(_LIBC, "mallinfo2"):
        return
    brk = _LIBC.sbrk(0)
    if brk == HEAP.brk:
        return
    HEAP.brk = brk
    size = _LIBC.mallinfo2().arena
    if size > HEAP.size:
        if HEAP.size:
            _LIBC.malloc_trim(NEVER_TRIM)   # pad: the top stays
        HEAP.size = size


def release_free_heap() -> None:
    """Hand freed heap memory back to the OS (after a compile: XLA's compile of
    a training step frees hundreds of MB of scratch; without this it stays in
    the resident set for the whole run, measured W2 1065 MB -> 696 MB)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)

