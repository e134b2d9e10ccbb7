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
- `mallopt` at `import lazyxla` (chosen), three settings:
  M_MMAP_THRESHOLD 32 MiB (glibc's upper bound): blocks below it come from
  a heap instead of a mapping of their own. M_TRIM_THRESHOLD 256 MiB: freed
  space at the top of the main heap is kept up to that size. M_TOP_PAD
  64 MiB: the main heap is extended by 64 MiB more than asked and trimming
  keeps 64 MiB free; a per-thread arena's heap (XLA's worker threads allocate
  from those) is created 64 MiB large. The pad is what keeps those arenas'
  memory: glibc unmaps an emptied heap of such an arena (any but its first)
  whatever the trim threshold, unless the heap below would then have less
  than the pad free; 64 MiB is the largest a heap can be (on 64-bit), so
  with this pad that never happens.
  Setting any of these disables glibc's dynamic mmap threshold, so they are
  set together (the trim threshold alone leaves a fixed 128 KiB mmap
  threshold). The number of arenas is left at glibc's default.

Measured with the settings (W1, fresh processes, 2 shared cores, glibc 2.36):
a steady step faults 0-2 pages in, against 4,600 or more in every step with
LAZYXLA_HEAP_TUNING=0. In the first ~50 steps the heap still grows now and
then by one 16 MiB gradient or by 40 MiB (4,096 or ~10,300 faults in one
step; resident memory goes up by as much and stays), at steps that differ
from run to run: 0-5 such steps of 37 in 40-step runs, none after step 40 in
200-step runs. That is the heap's layout settling, not memory going back to
the OS. M_ARENA_MAX=1 does not remove it (3-5 such steps of 37), so it is
not set; an earlier measurement had it slow XLA compiles by 40% (here on
2 cores W1's compile took 0.59-0.65 s with it, 0.60-0.70 s without). The benchmark reports the
faults per step (`minor_faults_per_step`); tests/test_host_heap.py checks the
settings' effect on single blocks.

The heap may thus stay well above what is live (up to 256 MiB at the main
heap's top, and emptied thread-arena heaps are kept); `release_free_heap`
gives it back after each compile (XLA's compiler scratch is the big one).
XLA's own scratch block: XLA:CPU allocates an executable's temporaries
(activations kept for the backward, intermediate products) as one block per
execution, freed when the execution ends. W2 gpt's is 128 MiB, above what any of
the settings above can keep: blocks of 32 MiB and more are mapped afresh each time,
and a per-thread arena (XLA's worker threads allocate it) cannot hold a block
larger than its 64 MiB heaps at all. So every W2 step faulted 32,700 pages in,
~50 ms of CPU time (system time) a ~190 ms CPU step on the 2-core VM (a fresh
128 MiB mapping takes 73 ms to touch there). Tuned, lazyxla compiles for CPU with
XLA's `xla_multiheap_size_constraint_per_heap` at `XLA_HEAP_LIMIT` (16 MiB,
below the mmap threshold): the temporaries become several blocks of at most
16 MiB (a single larger buffer gets a block of its own), which the heap keeps like
any other freed buffer: W2's steady step faults 0-30 pages in. The total is
unchanged (memory_analysis: the same temp bytes). The price: XLA:CPU refuses to
serialise an executable with more than one temporary block ("Multiple temp buffer
allocations found"), so a graph with more than 16 MiB of temporaries is not written
to the persistent compile cache (compile/disk_cache.py) and compiles once in every
process (W2: ~1.4 s, against ~50 ms of CPU saved in every step); smaller graphs are
cached as before. LAZYXLA_SPLIT_TEMPORARIES=0 keeps XLA's single block (and big
graphs in the persistent cache) with the rest of the tuning. `compiler_options()` gives it;
compile/cache.py merges it into every compile. Other ways weighed: M_MMAP_MAX=0
with M_ARENA_MAX=1 (serve it from the main heap) works only when XLA's worker
threads land on the main arena, which glibc's round robin over the arenas already
made (torch's threads) does not promise: 1 of 3 runs still faulted every step;
running executions on the calling thread (`jax_cpu_enable_async_dispatch` off)
also fixed it but makes every sync wait for its graph.

LAZYXLA_HEAP_TUNING=0 keeps glibc's defaults (and XLA's single block), and so does
any platform but CPU (on a GPU the device buffers are not heap blocks). Where glibc
is not the C library (musl, macOS) the functions do nothing.
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

