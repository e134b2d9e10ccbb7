"""The host timeline: what the host spent its time on, phase by phase, beside the device.

While a recording is on (`lx.debug.host_timeline()`), the sync layer marks its stages
(collect, plan, compile, dispatch, install, the host's own replays), each graph with the
user's line that caused its sync; the time between syncs is `trace` (the program's Python
and lazyxla's per-op tracing) with the ops traced in it; collections of Python's garbage
collector come from runtime/collector.py; the device track holds each graph from its
launch until its outputs are ready (a waiter thread, runtime/ready_times.py). Off, every
mark is one flag test: `start()` returns 0 and `mark` does nothing for 0.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

HOST, DEVICE, COLLECTOR = "host", "device", "collector"
_TRACKS = {HOST: 1, DEVICE: 2, COLLECTOR: 3}
# frames in lazyxla or torch are not the user's: the user's line is the first other one
_LAZYXLA = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class _Recording:
    on = False
    events: list = []           # (name, track, start_ns, end_ns, args)
    last_sync_end = 0
    traced_at_last_sync = 0


REC = _Recording()


def start() -> int:
    """A phase's start time, or 0 while nothing is recorded."""
    return time.perf_counter_ns() if REC.on else 0


def mark(name: str, started: int, track: str = HOST, **args) -> None:
    """Record phase `name` from `started` (a `start()`) until now."""
    if started:
        REC.events.append((name, track, started, time.perf_counter_ns(), args))


def span(name: str, started: int, ended: int, track: str, **args) -> None:
    """Record a phase whose end was measured elsewhere (the device's, the collector's)."""
    if REC.on:
        REC.events.append((name, track, started, ended, args))


def sync_begins(traced_ops: int) -> int:
    """At a sync's start: record the tracing since the last one; the sync's start time."""
    if not REC.on:
        return 0
    now = time.perf_counter_ns()
    if REC.last_sync_end:
        since = traced_ops - REC.traced_at_last_sync
        REC.events.append(("trace", HOST, REC.last_sync_end, now,
                           {"ops": since if since >= 0 else traced_ops}))   # (counters cleared between)
    REC.traced_at_last_sync = traced_ops
    return now


def sync_ends(name: str, started: int, **args) -> None:
    if started:
        mark(name, started, **args)
        REC.last_sync_end = time.perf_counter_ns()


def user_line() -> str:
    """"file:line" of the innermost frame outside lazyxla and torch (recording only)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_LAZYXLA) and f"{os.sep}torch{os.sep}" not in name and not name.startswith("<"):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def begin() -> None:
    REC.events = []
    REC.last_sync_end = 0
    REC.on = True


def end() -> list:
    REC.on = False
    events, REC.events = REC.events, []
    return events


def summary(events: list) -> dict:
    """{phase: {"count", "total_ms", "mean_ms"}} over `events`, device and collector apart."""
    out: dict = {}
    for name, track, t0, t1, _ in events:
        key = name if track == HOST else f"{track}:{name}"
        entry = out.setdefault(key, {"count": 0, "total_ms": 0.0})
        entry["count"] += 1
        entry["total_ms"] += (t1 - t0) / 1e6
    for entry in out.values():
        entry["total_ms"] = round(entry["total_ms"], 3)
        entry["mean_ms"] = round(entry["total_ms"] / entry["count"], 3)
    return out


def chrome_trace(events: list) -> dict:
    """The events as a Chrome / Perfetto trace (ui.perfetto.dev, chrome://tracing)."""
    origin = min((e[2] for e in events), default=0)
    out = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}}
           for track, tid in _TRACKS.items()]
    for name, track, t0, t1, args in events:
        out.append({"name": name, "cat": track, "ph": "X", "pid": 1, "tid": _TRACKS[track],
                    "ts": (t0 - origin) / 1e3, "dur": max(t1 - t0, 0) / 1e3,
                    "args": {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in args.items()}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write(events: list, path: str) -> None:
    with open(path, "w") as f:
        json.dump(chrome_trace(events), f)


def elapsed_ms(events: list) -> Optional[float]:
    if not events:
        return None
    return (max(e[3] for e in events) - min(e[2] for e in events)) / 1e6
