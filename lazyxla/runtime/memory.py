"""The ledger of live device buffers: how much device memory lazyxla's tensors hold.

Every `DeviceData` is charged here, per local device, when it is created (an upload, a
graph output; in SPMD mode each device holding a shard is charged that shard's bytes) and
released when its buffer goes away (donated, or the last reference to the handle died).
The peak also covers what an executing graph needs beyond the live buffers
(`note_execution`), so `max_memory_allocated` is the high-water mark a device actually
had to hold. `bytes_limit` is what the device can hold; `check_fits` refuses a graph that
would not fit with `torch.OutOfMemoryError` and the memory report, and `is_out_of_memory`
recognises that error and XLA's RESOURCE_EXHAUSTED. The report in that error comes from
`lazyxla/memory_report.py`, a public module above runtime/: an import-time seam it fills
with `set_reporter`. The ledger keeps sums, not the handles: a captured step installs and
donates hundreds of buffers, so no per-handle registry is updated on that path; the report
finds the live handles when asked (memory_report.py, one walk of the collector's objects).

Design: docs/design.md, "runtime/memory.py".
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, Iterator, Optional

import torch

from .._jax import jax_devices
from ..ir.graph import byte_size
from . import backend


class _Ledger:
    __slots__ = ("current", "peak", "allocated", "freed", "buffers", "peak_buffers")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0
        self.buffers = self.peak_buffers = 0


_ledgers: dict[int, _Ledger] = {}
_limit_override: dict[int, int] = {}
# Reentrant: a garbage collection inside charge() may release a dying handle (__del__).
_lock = threading.RLock()


def _ledger(device: int) -> _Ledger:
    led = _ledgers.get(device)
    if led is None:
        led = _ledgers[device] = _Ledger()
    return led


@functools.lru_cache(maxsize=None)
def _device_index() -> dict:
    return {d.id: i for i, d in enumerate(jax_devices())}


def charges(shape: tuple, dtype: torch.dtype, device: int, sharding) -> tuple:
    """((local device index, bytes), ...) a buffer of `shape` occupies."""
    if sharding is None:
        return ((device, byte_size(shape, dtype)),)
    n = byte_size(sharding.shard_shape(tuple(shape)), dtype)
    index = _device_index()
    return tuple((index[d.id], n) for d in sharding.addressable_devices if d.id in index)


def charge(parts: tuple) -> None:
    """A new handle's charge `parts` ((device, bytes), ...) added to the ledgers."""
    with _lock:
        for device, n in parts:
            led = _ledger(device)
            led.current += n
            led.allocated += n
            led.buffers += 1
            if led.current > led.peak:
                led.peak = led.current
            if led.buffers > led.peak_buffers:
                led.peak_buffers = led.buffers


def charge_outputs(nbytes: int, count: int, device: int) -> None:
    """`charge` for `count` new single-device handles of `nbytes` in all on `device` at once
    (one lock, one ledger update: a step installs hundreds); each handle's `charged` is set
    by its maker (sync/install.py)."""
    with _lock:
        led = _ledger(device)
        led.current += nbytes
        led.allocated += nbytes
        led.buffers += count
        if led.current > led.peak:
            led.peak = led.current
        if led.buffers > led.peak_buffers:
            led.peak_buffers = led.buffers


def release(charges) -> None:
    """Each handle's charge of `charges` released: donated (a batch), or dropped
    (DeviceData.__del__, in whichever thread drops the last reference)."""
    with _lock:
        for parts in charges:
            for device, n in parts:
                led = _ledgers[device]   # charged before, so it exists
                led.current -= n
                led.freed += n
                led.buffers -= 1


def note_execution(devices, extra: int) -> None:
    """A graph is about to run and needs `extra` bytes beyond the live buffers."""
    with _lock:
        for device in devices:
            led = _ledger(device)
            if led.current + extra > led.peak:
                led.peak = led.current + extra


def allocated(device: int) -> int:
    return _ledger(device).current


def peak(device: int) -> int:
    return _ledger(device).peak


def reset_peak(device: int) -> None:
    led = _ledger(device)
    led.peak = led.current
    led.peak_buffers = led.buffers


def reset_accumulated(device: int) -> None:
    led = _ledger(device)
    led.allocated = led.freed = 0


def stats(device: int) -> dict:
    """Counters under torch.cuda.memory_stats' names."""
    led = _ledger(device)
    return {"allocated_bytes.all.current": led.current, "allocated_bytes.all.peak": led.peak,
            "allocated_bytes.all.allocated": led.allocated, "allocated_bytes.all.freed": led.freed,
            "active.all.current": led.buffers, "active.all.peak": led.peak_buffers,
            "bytes_limit": bytes_limit(device)}


def bytes_limit(device: int) -> int:
    override = _limit_override.get(device)
    return override if override is not None else capacity(device)


@functools.lru_cache(maxsize=None)
def capacity(device: int) -> int:
    """What local device `device` holds in all (the backend's figure, fixed for the process;
    asked before every graph runs, by check_fits)."""
    return backend.current().memory_limit(device)


def backend_stats(device: int) -> Optional[dict]:
    """What the device's allocator reports (GPU, TPU); None where it reports nothing (CPU)."""
    return backend.current().memory_stats(device)


@contextlib.contextmanager
def limit_for_testing(device: int, nbytes: int) -> Iterator[None]:
    """Pretend `device` holds only `nbytes` (tests of the out-of-memory path, which must
    never really exhaust the machine)."""
    _limit_override[device] = nbytes
    try:
        yield
    finally:
        del _limit_override[device]


class _Reporter:
    """The memory report memory_report.py installs (None until then): an import-time seam."""
    fn: Optional[Callable[[int], str]] = None


_REPORTER = _Reporter()


def set_reporter(fn: Callable[[int], str]) -> None:
    _REPORTER.fn = fn


def report_text(device: int) -> str:
    fn = _REPORTER.fn
    if fn is None:
        return f"lazyxla: device {device}: {allocated(device):,} bytes in live buffers"
    try:
        return fn(device)
    except Exception as e:  # noqa: BLE001 - the report must never hide the error it explains
        return f"(memory report failed: {type(e).__name__}: {e})"


def execution_extra(analysis: dict) -> int:
    """Bytes a graph needs beyond its live arguments while it runs: outputs not aliased
    to donated inputs, and XLA's temporaries (from the executable's memory analysis)."""
    return (analysis.get("output_size_in_bytes", 0) - analysis.get("alias_size_in_bytes", 0)
            + analysis.get("temp_size_in_bytes", 0))


def check_fits(devices, analysis: dict, graph_key: str) -> None:
    """Refuse a graph whose run would exceed a device's limit, before it starts: nothing
    has run, every tensor keeps its value or pending work."""
    extra = execution_extra(analysis)
    for device in devices:
        need = allocated(device) + extra
        limit = bytes_limit(device)
        if need > limit:
            raise torch.OutOfMemoryError(
                f"lazyxla: out of memory on device {device}: graph {graph_key} needs {_gib(extra)} "
                f"(outputs {_gib(analysis.get('output_size_in_bytes', 0))}, temporaries "
                f"{_gib(analysis.get('temp_size_in_bytes', 0))}, aliased "
                f"{_gib(analysis.get('alias_size_in_bytes', 0))}) beyond the {_gib(allocated(device))} in "
                f"live buffers: {_gib(need)} in all, but the device holds {_gib(limit)}. Free tensors "
                "you no longer need (del them), sync smaller pieces of work more often, or use "
                f"smaller sizes.\n{report_text(device)}")


def is_out_of_memory(e: BaseException) -> bool:
    if isinstance(e, torch.OutOfMemoryError):
        return True
    text = str(e)
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"
