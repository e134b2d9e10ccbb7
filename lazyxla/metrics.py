"""Counters and metrics with PyTorch/XLA's names and semantics.

A *counter* is an integer that only matters when non-zero: `counter_value`
returns None for unknown or zero counters and `counter_names` lists only
non-zero ones (as upstream). A *metric* is a series of samples: we keep the
number of samples and their sum for all time since the last clear, plus the
last `LAZYXLA_METRICS_SAMPLES` (default 1024) `(timestamp, value)` pairs.
Time metrics are in nanoseconds.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Iterable, Optional

from . import config
from .state import STATE

_lock = threading.Lock()
_counters: dict[str, int] = collections.defaultdict(int)


class _Metric:
    __slots__ = ("total", "accumulator", "samples")

    def __init__(self) -> None:
        self.total = 0
        self.accumulator = 0.0
        self.samples: collections.deque = collections.deque(maxlen=config.SETTINGS.metrics_samples)


_metrics: dict[str, _Metric] = {}

DEFAULT_SHORT_COUNTERS = ("CachedCompile", "UncachedCompile", "MarkStep", "TracedOps")
DEFAULT_SHORT_METRICS = (
    "CompileTime",
    "ExecuteTime",
    "TransferToDeviceTime",
    "TransferFromDeviceTime",
    "InputOutputAliasCount",
    "DonatedBytes",
)


# Detailed records, PyTorch/XLA's finer names, off by default because they cost time on
# lazyxla's hot paths; `set_op_records(True)` (lazyxla.compat does) turns them on:
# * per op: a counter per traced op (`xla::<op>`, upstream's names; ops whose result is a
#   host value, such as `.item()`'s `_local_scalar_dense`, count as `aten::<op>`, as
#   upstream's fallback counters do), `CreateXlaTensor` per fresh lazyxla tensor an op
#   returns, `DestroyXlaTensor` per lazyxla tensor freed, the `LazyTracing` time of each
#   op. Off, the per-op path pays one flag test (frontend/dispatch.py).
# * per graph: `TensorsGraphSize` (nodes of a synced graph), `DeviceLockWait` (a sync's
#   wait for the runtime lock), `UnwrapXlaData` / `WrapXlaData` (gathering the graph's
#   parameter buffers / installing its outputs as device data) and `ExecuteReadyTime`
#   (launch until the outputs are ready, measured by a waiter thread,
#   runtime/ready_times.py). Off, a graph pays a few flag tests; on, about 25 us.
def set_op_records(enabled: bool) -> None:
    """Turn the detailed records (see above) on or off; off by default (the run-time
    state's `op_records` mode, lazyxla/state.py)."""
    STATE.set("op_records", bool(enabled))


def op_records_enabled() -> bool:
    return STATE.op_records


# Called before any read of the metrics: measurements still in flight (the time until a
# graph's outputs are ready, runtime/ready_times.py) land first, so a read after a host
# read or `wait_device_ops()` sees every execution that has finished.
before_read: list = []


def _settle() -> None:
    for hook in before_read:
        hook()


# -- recording (internal) ---------------------------------------------------------------

def counter_add(name: str, value: int = 1) -> None:
    _counters[name] += value


def metric_add(name: str, value: float) -> None:
    with _lock:
        m = _metrics.get(name)
        if m is None:
            m = _metrics[name] = _Metric()
        m.total += 1
        m.accumulator += value
        m.samples.append((time.time(), float(value)))


class timed:
    """Context manager recording the elapsed nanoseconds of its body in a metric."""

    __slots__ = ("name", "start")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "timed":
        self.start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc) -> None:
        metric_add(self.name, time.perf_counter_ns() - self.start)


# -- public API (README.md, "What is supported"; upstream's names: docs/compat.md) ------

def counter_names() -> list[str]:
    return sorted(k for k, v in list(_counters.items()) if v)


def counter_value(name: str) -> Optional[int]:
    return _counters.get(name) or None


def metric_names() -> list[str]:
    _settle()
    return sorted(k for k, m in list(_metrics.items()) if m.total)


def metric_data(name: str):
    """`(total_samples, accumulator, samples)` or None when the metric has no samples."""
    _settle()
    m = _metrics.get(name)
    if m is None or not m.total:
        return None
    return m.total, m.accumulator, tuple(m.samples)


def clear_counters() -> None:
    _counters.clear()


def clear_metrics() -> None:
    _settle()   # a measurement in flight belongs to the time before the clear
    with _lock:
        _metrics.clear()


def clear_all() -> None:
    clear_counters()
    clear_metrics()


def _format_value(name: str, value: float) -> str:
    if name.endswith("Time"):
        if value >= 1e9:
            return f"{value / 1e9:.3f}s"
        if value >= 1e6:
            return f"{value / 1e6:.3f}ms"
        return f"{value / 1e3:.3f}us"
    if name.endswith("Bytes"):
        return f"{value / 2**20:.2f}MB"
    return f"{value:g}"


def _metric_report(name: str) -> str:
    m = _metrics[name]
    values = sorted(v for _, v in m.samples)
    lines = [f"Metric: {name}", f"  TotalSamples: {m.total}",
             f"  Accumulator: {_format_value(name, m.accumulator)}"]
    if values:
        pct = []
        for p in (1, 5, 10, 20, 50, 80, 90, 95, 99):
            idx = min(len(values) - 1, int(len(values) * p / 100))
            pct.append(f"{p}%={_format_value(name, values[idx])}")
        lines.append("  Percentiles: " + "; ".join(pct))
    return "\n".join(lines)


def _report(counters: Iterable[str], metrics: Iterable[str]) -> str:
    parts = [_metric_report(n) for n in metrics if n in _metrics and _metrics[n].total]
    parts += [f"Counter: {n}\n  Value: {_counters[n]}" for n in counters if _counters.get(n)]
    return "\n".join(parts) + ("\n" if parts else "")


def report() -> str:
    """Every metric then every counter, as PyTorch/XLA's `metrics_report()`."""
    _settle()
    return _report(counter_names(), metric_names())


def short_report(counter_names_: Optional[Iterable[str]] = None,
                 metric_names_: Optional[Iterable[str]] = None) -> str:
    """The important few; host-fallback `aten::*` counters are always appended."""
    _settle()
    counters = list(counter_names_ or DEFAULT_SHORT_COUNTERS)
    counters += [n for n in counter_names() if n.startswith("aten::") and n not in counters]
    return _report(counters, metric_names_ or DEFAULT_SHORT_METRICS)
