"""The host heap keeps freed buffers for reuse (runtime/host_heap.py).

Asserts allocator state, not page faults or timings: where glibc put a block
(`mallinfo2`: `hblkhd` = bytes in mmapped blocks) and whether the block's pages
are still mapped and resident after `free` (`mincore` on the block's own
pages). Each case runs in a fresh interpreter, since `mallopt` settings and the
heap's layout are per process. The settings themselves are checked in an
interpreter that loaded only host_heap.py, so every block comes from growing
the heap and not from space that importing torch and JAX left free (which
would hide a wrong threshold); one case checks that `import lazyxla` applies
them. 20 MiB: W1's largest gradient is 16 MiB (its 2048x2048 weight), between
glibc's 128 KiB default mmap threshold and our 32 MiB one. The W1 page-fault
count per step is a benchmark figure (`minor_faults_per_step`)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from lazyxla.runtime import backend
from lazyxla.runtime.backend import host_heap
from helpers import child_env
from lazyxla.runtime.backend import platforms as platforms_module

@pytest.fixture(autouse=True)
def _keep_tuned_state(monkeypatch):
    # tune() records which tuning took (compile options follow it): each test starts untuned,
    # and the suite's process is left as it was, its backend too
    monkeypatch.setattr(host_heap.HEAP, "mode", None)
    monkeypatch.setattr(backend._CURRENT, "backend", backend._CURRENT.backend)


glibc_only = pytest.mark.skipif(host_heap._LIBC is None or not hasattr(host_heap._LIBC, "mallinfo2"),
                                reason="needs glibc >= 2.33 (mallopt, mallinfo2)")

# Run in the child as `PROBE case mode host_heap.py`. Each case must be the
# process's first large malloc: glibc's default (dynamic) mmap threshold rises
# to the size of the last mmapped block freed.
PROBE = """
import ctypes, importlib.util, json, os, sys, threading
case, mode = sys.argv[1], sys.argv[2]
if mode == "import_after_thread":   # a thread that allocated before the import has an arena of its own
    t = threading.Thread(target=lambda: bytearray(10**6)); t.start(); t.join()
if mode.startswith("import"):
    import lazyxla
    lazyxla.device_count()   # the first use of the device applies the tuning (its platform is known then)
    from lazyxla.runtime.backend import host_heap
else:   # host_heap.py alone, without torch and JAX: a heap that only the interpreter has used
    spec = importlib.util.spec_from_file_location("host_heap", sys.argv[3])
    host_heap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_heap)
    if mode == "tuned":
        assert host_heap.tune()
    elif mode == "tuned_small_pad":   # ours but glibc's default top pad (128 KiB)
        assert host_heap.tune() and host_heap._LIBC.mallopt(host_heap._M_TOP_PAD, 128 * 2**10) == 1

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 2**20

VEC = ctypes.create_string_buffer(128 * MB // PAGE)   # allocated up front: no malloc between free and reuse

def resident(p, n):
    # fraction of the block's whole pages that are mapped and resident; 0.0 when unmapped
    start, end = -(-p // PAGE) * PAGE, (p + n) // PAGE * PAGE
    pages = (end - start) // PAGE
    if libc.mincore(start, end - start, VEC) != 0:
        return 0.0   # ENOMEM: (part of) the range is no longer mapped
    return sum(b & 1 for b in VEC.raw[:pages]) / pages

def touched(n):
    p = libc.malloc(n)
    ctypes.memset(p, 1, n)   # the pages a buffer's writer faults in
    return p

def one_block():
    before = libc.mallinfo2().hblkhd
    p = touched(20 * MB)
    mmapped = libc.mallinfo2().hblkhd - before >= 20 * MB
    libc.free(p)
    kept = resident(p, 20 * MB)
    q = libc.malloc(20 * MB)
    libc.free(q)
    return {"mmapped": mmapped, "resident_after_free": kept, "same_block_again": q == p}

def four_blocks():
    # 96 MiB freed at the top of the main heap: more than the top pad keeps, so
    # the trim threshold decides whether glibc gives it back
    blocks = [touched(24 * MB) for _ in range(4)]
    for b in reversed(blocks):
        libc.free(b)
    return {"resident_after_free": min(resident(b, 24 * MB) for b in blocks)}

def second_heap():
    # three 24 MiB blocks on a thread: a per-thread arena's heaps are at most
    # 64 MiB, so the third one opens a second heap, which glibc unmaps as soon
    # as it falls empty unless the top pad keeps it
    blocks = [touched(24 * MB) for _ in range(3)]
    libc.free(blocks[2])
    kept = resident(blocks[2], 24 * MB)
    libc.free(blocks[1]); libc.free(blocks[0])
    return {"resident_after_free": kept}

def trimmed():
    p = touched(20 * MB)
    libc.free(p)
    kept = resident(p, 20 * MB)
    host_heap.release_free_heap()
    return {"resident_after_free": kept, "resident_after_release": resident(p, 20 * MB)}

def on_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.update(fn()))
    t.start(); t.join()
    return out

def big_block():
    # 100 MiB: above the largest mmap threshold and a thread arena's 64 MiB heap (XLA's
    # scratch of a GPT-2 124M step, allocated on one of its worker threads)
    before = libc.mallinfo2().hblkhd
    p = touched(100 * MB)
    mmapped = libc.mallinfo2().hblkhd - before >= 100 * MB
    libc.free(p)
    return {"mmapped": mmapped, "resident_after_free": resident(p, 100 * MB)}

CASES = {"main": one_block, "thread": lambda: on_thread(one_block), "four_blocks": four_blocks,
         "second_heap": lambda: on_thread(second_heap), "release": trimmed,
         "big_thread": lambda: on_thread(big_block)}
print(json.dumps({**CASES[case](), "mode": host_heap.HEAP.mode if mode.startswith("import") else None}))
"""


def _probe(case: str, mode: str) -> dict:
    """`mode`: "import" (`import lazyxla` and a device query, tuning on), "import_off" (the same with
    LAZYXLA_HEAP_TUNING=0), "import_after_thread" (a thread allocates first), "tuned" /
    "default" (host_heap.py alone, `tune()` called or not), "tuned_small_pad"."""
    env = child_env(LAZYXLA_HEAP_TUNING="0" if mode == "import_off" else "1")
    args = [case, "import" if mode in ("import", "import_off") else mode, host_heap.__file__]
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if got["mode"] is None:
        del got["mode"]
    return got


@glibc_only
def test_tune_takes_effect_on_glibc():
    assert host_heap.tune() is True


def test_tuning_can_be_switched_off(monkeypatch):
    libc = _RecordingLibc()
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    assert host_heap.tune(enabled=False) is False
    assert libc.calls == []


class _RecordingLibc:
    """Stands in for glibc: records the mallopt calls that tune() makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_tuning_is_off_on_accelerators(monkeypatch, platform):
    # device buffers are not heap blocks there: glibc keeps its defaults
    libc = _RecordingLibc()
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    backend.select(platform)
    assert libc.calls == [] and host_heap.HEAP.mode is None


def test_tuning_on_cpu_sets_the_three_settings(monkeypatch):
    libc = _RecordingLibc()
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    assert host_heap.tune() is True
    assert sorted(libc.calls) == sorted([(host_heap._M_MMAP_THRESHOLD, host_heap.MMAP_THRESHOLD),
                                         (host_heap._M_TRIM_THRESHOLD, host_heap.TRIM_THRESHOLD),
                                         (host_heap._M_TOP_PAD, host_heap.TOP_PAD)])


@glibc_only
@pytest.mark.parametrize("case", ["main", "thread"])
def test_freed_block_stays_in_the_heap_for_reuse(case):
    # the main thread allocates from the main arena, a new thread from an arena of
    # its own (whose first heap the 64 MiB top pad already makes 64 MiB)
    assert _probe(case, "tuned") == {"mmapped": False, "resident_after_free": 1.0, "same_block_again": True}


@glibc_only
@pytest.mark.parametrize("case", ["main", "thread"])
def test_glibc_defaults_mmap_the_block_and_unmap_it_on_free(case):
    # the control: what the tuning changes (each freed gradient went back to the OS)
    got = _probe(case, "default")
    assert got["mmapped"] is True and got["resident_after_free"] == 0.0


@glibc_only
def test_trim_threshold_keeps_a_freed_heap_top_beyond_the_pad():
    assert _probe("four_blocks", "tuned") == {"resident_after_free": 1.0}
    assert _probe("four_blocks", "default") == {"resident_after_free": 0.0}


@glibc_only
def test_top_pad_keeps_an_emptied_secondary_heap():
    assert _probe("second_heap", "tuned") == {"resident_after_free": 1.0}
    assert _probe("second_heap", "tuned_small_pad") == {"resident_after_free": 0.0}


@glibc_only
def test_release_free_heap_gives_freed_pages_back():
    got = _probe("release", "tuned")
    assert got["resident_after_free"] == 1.0
    assert got["resident_after_release"] < 0.05   # malloc_trim may keep a page or two of a chunk


@glibc_only
def test_first_device_use_applies_the_tuning():
    # after `import lazyxla` and a first device query a 20 MiB block is mmapped only with
    # LAZYXLA_HEAP_TUNING=0
    assert _probe("main", "import")["mmapped"] is False
    assert _probe("main", "import_off")["mmapped"] is True


@glibc_only
def test_import_on_cpu_keeps_big_blocks_of_any_thread_in_one_heap():
    # mode ONE_HEAP: a worker thread's 100 MiB block comes from the main heap and stays
    # there after free; the temporaries need no splitting (graphs stay cacheable)
    got = _probe("big_thread", "import")
    assert got == {"mmapped": False, "resident_after_free": 1.0, "mode": host_heap.ONE_HEAP}
    # the control: the tuning at the first device use (mode SPLIT) maps it afresh every time
    assert _probe("big_thread", "tuned") == {"mmapped": True, "resident_after_free": 0.0}


@glibc_only
def test_an_earlier_thread_arena_leaves_the_import_to_the_split_tuning():
    # glibc keeps that thread's arena, and new threads may land on it: not one heap then
    got = _probe("main", "import_after_thread")
    assert got == {"mmapped": False, "resident_after_free": 1.0, "same_block_again": True,
                   "mode": host_heap.SPLIT}


@pytest.mark.parametrize("platforms, cpu", [("cpu", True), ("CPU,tpu", True), ("tpu", False),
                                            ("cuda,cpu", False)])
def test_the_import_asks_jax_platforms_which_backend_comes(monkeypatch, platforms, cpu):
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    assert (platforms_module.expected_platform() == "cpu") is cpu
    libc = _RecordingLibc()
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    monkeypatch.setattr(host_heap, "arena_count", lambda: 1)
    backend.prepare_at_import()
    assert bool(libc.calls) is cpu and (host_heap.HEAP.mode == host_heap.ONE_HEAP) is cpu


def test_an_installed_accelerator_plugin_means_no_import_tuning(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    real = platforms_module.importlib.util.find_spec
    monkeypatch.setattr(platforms_module.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "libtpu" else real(name, *a))
    assert platforms_module.expected_platform() == "accelerator"


def test_another_platform_undoes_the_import_tuning(monkeypatch):
    libc = _RecordingLibc()
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    monkeypatch.setattr(host_heap.HEAP, "mode", host_heap.ONE_HEAP)
    backend.select("gpu")
    assert libc.calls == list(host_heap._DEFAULTS) and host_heap.HEAP.mode is None
    assert host_heap.compiler_options() == {}


# XLA's temporaries: XLA:CPU allocates an executable's scratch as one block per run, which
# above 64 MiB (a thread arena's heap) glibc maps afresh every step; with the heap tuned,
# lazyxla compiles with blocks of at most XLA_HEAP_LIMIT, which the heap keeps. The page
# faults this saves depend on the host (transparent huge pages, glibc), so they are a
# benchmark figure (docs/benchmarks.md, "W2's step and XLA's scratch"), not asserted here.


def test_compiler_options_follow_the_tuning(monkeypatch):
    # mode SPLIT only: ONE_HEAP keeps XLA's one block of temporaries (and the graph cacheable);
    # the options are fixed when the backend starts and make its compile token (cache keys)
    from lazyxla.compile import cache
    from lazyxla.ir.graph import Graph
    graph = Graph.__new__(Graph)
    graph.order = []
    split = {"xla_multiheap_size_constraint_per_heap": host_heap.XLA_HEAP_LIMIT}
    monkeypatch.setattr(host_heap, "_LIBC", _RecordingLibc())
    assert backend.select("cpu").compile_token == tuple(split.items())
    assert cache.compiler_options(graph) == split
    with cache.config.override(split_temporaries=False):   # LAZYXLA_SPLIT_TEMPORARIES=0
        assert backend.select("cpu").compile_token == ()
        assert cache.compiler_options(graph) == {}
    backend.select("tpu")
    assert cache.compiler_options(graph) == {}
    with cache.config.override(heap_tuning=False):
        backend.select("cpu")
        assert cache.compiler_options(graph) == {}
    monkeypatch.setattr(host_heap.HEAP, "mode", host_heap.ONE_HEAP)
    backend.select("cpu")
    assert cache.compiler_options(graph) == {}


class _GrowingHeapLibc(_RecordingLibc):
    """glibc whose main heap has the sizes given, one per barrier: each `sbrk(0)` moves on
    to the next size (the break at the heap's end), `mallinfo2` reports the current one."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__()
        self.sizes = iter(sizes)
        self.size = 0
        self.trims: list[int] = []
        self.infos = 0

    def sbrk(self, increment: int) -> int:
        assert increment == 0
        self.size = next(self.sizes)
        return self.size

    def mallinfo2(self):
        self.infos += 1
        return type("Info", (), {"arena": self.size})()

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        return 1


def test_a_step_that_grew_the_one_heap_gives_its_free_pages_back(monkeypatch):
    # barriers see the heap at 100, 100, 228 (a scratch block fitted no hole), 228 MiB:
    # one trim, after the growth, and with a pad that keeps the heap's top
    libc = _GrowingHeapLibc([100 * 2**20, 100 * 2**20, 228 * 2**20, 228 * 2**20])
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    monkeypatch.setattr(host_heap.HEAP, "mode", host_heap.ONE_HEAP)
    monkeypatch.setattr(host_heap.HEAP, "size", 0)
    monkeypatch.setattr(host_heap.HEAP, "brk", None)
    for _ in range(4):
        host_heap.after_step()
    assert libc.trims == [host_heap.NEVER_TRIM]
    # mallinfo2 walks every free chunk: asked only where the break moved (the first barrier
    # and the growth), not at the barriers that found the heap as it was
    assert libc.infos == 2


def test_after_step_does_nothing_outside_one_heap(monkeypatch):
    libc = _GrowingHeapLibc([1, 2, 3])
    monkeypatch.setattr(host_heap, "_LIBC", libc)
    for mode in (None, host_heap.SPLIT):
        monkeypatch.setattr(host_heap.HEAP, "mode", mode)
        host_heap.after_step()
    assert libc.trims == [] and libc.infos == 0 and next(libc.sizes) == 1
