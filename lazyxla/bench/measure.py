"""Process memory and timing helpers for the benchmark children (stdlib only:
also runs under the PyTorch/XLA interpreter, which may lack psutil)."""
from __future__ import annotations

import os
import resource
import statistics
import time

MB = 2**20


def _status_kb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def rss_mb() -> float:
    """Current resident set size in MiB."""
    kb = _status_kb("VmRSS")
    if kb is not None:
        return kb / 1024
    try:
        # optional: psutil, only where /proc is missing
        import psutil
        return psutil.Process().memory_info().rss / MB
    except ImportError:  # pragma: no cover - non-Linux without psutil
        return peak_rss_mb()


def peak_rss_mb() -> float:
    """Peak resident set size in MiB since process start or the last `reset_peak()`."""
    kb = _status_kb("VmHWM")
    if kb is not None:
        return kb / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0, /proc/self/clear_refs "5"),
    so a later `peak_rss_mb()` covers only what follows. False where unsupported;
    the peak then includes everything before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def minor_faults() -> int:
    """Minor page faults of the whole process so far: pages touched for the first
    time since the OS handed them out. A training step that reuses freed memory
    adds none; one whose outputs land in fresh pages adds one per 4 KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def counts(values: list[int]) -> dict:
    """Median and max of per-step counts (the max shows one-off events: a heap growing)."""
    if not values:
        return {"median": None, "max": None}
    return {"median": statistics.median(values), "max": max(values)}


def now() -> float:
    return time.perf_counter()


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


def summary(values_s: list[float]) -> dict:
    """Median and min (ms) of a list of durations in seconds."""
    if not values_s:
        return {"median": None, "min": None}
    return {"median": ms(statistics.median(values_s)), "min": ms(min(values_s))}


def mean(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
