"""`torch_xla.debug.metrics` (met): lx.metrics under upstream's names and counting rules.

Counter and metric names are upstream's where lazyxla has the same quantity (docs/compat.md,
"torch_xla.debug.metrics (met)"); lazyxla-only ones (TracedOps, DonatedBytes) appear too.
Where upstream counts an event that lazyxla's own counter does not (under torch_xla names,
upstream's counter semantics: README.md, "Coming from PyTorch/XLA"), the layer keeps
the difference in an overlay that only these functions read, so `lx.metrics` keeps
lazyxla's semantics:

* `XlaSetBufferDonation` +1 per `dynamo_set_buffer_donor_` call in a graph dynamo hands
  the "openxla" backend (upstream also runs the binding on dynamo's fake tensors);
* whatever `torch_xla._XLAC._xla_increment_counter` adds.

Metrics whose upstream name means a measurement lazyxla keeps under another name read
lazyxla's: `TensorToData` (host tensors made device data) is `TransferToDeviceTime`;
`ExecuteTime` (upstream: a graph's run until its outputs are ready) is
`ExecuteReadyTime`, and lazyxla's own `ExecuteTime` (the launch alone) is not shown
under torch_xla names. Per-op
counters (`xla::<op>`), `CreateXlaTensor` and `LazyTracing` are lazyxla's op records,
which `import torch_xla` switches on (lx.metrics.set_op_records).
"""
from __future__ import annotations

import collections
import re
from typing import Iterable, List, Optional

from lazyxla import metrics as _m
from lazyxla.metrics import clear_metrics  # noqa: F401

from ...unsupported import unsupported_names

_overlay: "collections.Counter[str]" = collections.Counter()
METRIC_ALIASES = {"TensorToData": "TransferToDeviceTime",   # upstream name -> lazyxla's
                  "ExecuteTime": "ExecuteReadyTime"}
# upstream counter -> lazyxla's: lazyxla keeps no device-data cache for scalars, so every
# scalar a run sends to the device is one that no cache held
COUNTER_ALIASES = {"DeviceDataCacheMiss": "UploadedScalars"}


def metric_names() -> List[str]:
    names = _m.metric_names()
    return sorted((set(names) - set(METRIC_ALIASES)) | {a for a, n in METRIC_ALIASES.items() if n in names})


def metric_data(name: str):
    return _m.metric_data(METRIC_ALIASES.get(name, name))


def add_upstream_count(name: str, value: int = 1) -> None:
    """Count `value` more under `name` as seen through this module only."""
    _overlay[name] += value


def counter_value(name: str) -> Optional[int]:
    """lazyxla's value plus the overlay; None when zero or unknown, as upstream."""
    value = (_m.counter_value(COUNTER_ALIASES.get(name, name)) or 0) + _overlay.get(name, 0)
    return value or None


def counter_names() -> List[str]:
    names = set(_m.counter_names())
    names |= {a for a, n in COUNTER_ALIASES.items() if n in names}
    return sorted(names | {n for n, v in _overlay.items() if v})


def clear_counters() -> None:
    _m.clear_counters()
    _overlay.clear()


def clear_all() -> None:
    clear_counters()
    clear_metrics()


def executed_fallback_ops() -> List[str]:
    """The ops run on the host since the last clear: lazyxla's `aten::<op>` counters
    (host fallbacks and host reads such as `.item()`, with op records on)."""
    return [n for n in counter_names() if n.startswith("aten::")]


def _with_overlay(report: str, wanted: Optional[Iterable[str]] = None, aliases: Iterable[str] = ()) -> str:
    """lazyxla's report (metrics, then counters) with the metric `aliases` shown under
    their own names too and the counters redone from the merged values; `wanted`: the
    counter names asked for (None: all)."""
    found = re.search(r"^Counter: ", report, re.M)
    head = report if found is None else report[:found.start()]
    for alias in aliases:   # lazyxla's metric of the upstream name, if any, gives way
        head = re.sub(rf"^Metric: {alias}\n(?:  .*\n)*", "", head, flags=re.M)
    for alias in aliases:
        block = re.search(rf"^Metric: {METRIC_ALIASES[alias]}\n(?:  .*\n)*", head, re.M)
        if block:
            head += f"Metric: {alias}\n" + block.group(0).split("\n", 1)[1]
    shown = set(re.findall(r"^Counter: (.+)$", report, re.M))
    shown |= {a for a, n in COUNTER_ALIASES.items() if n in shown}
    asked = None if wanted is None else set(wanted)
    names = [n for n in counter_names() if n in shown or (_overlay.get(n) and (asked is None or n in asked))]
    return head + "".join(f"Counter: {n}\n  Value: {counter_value(n)}\n" for n in names)


def metrics_report() -> str:
    return _with_overlay(_m.report(), aliases=METRIC_ALIASES)


def short_metrics_report(counter_names: Optional[Iterable[str]] = None,
                         metric_names: Optional[Iterable[str]] = None) -> str:
    """lx.metrics.short_report: falsy arguments mean lazyxla's default names (upstream's
    defaults plus UncachedCompile, TracedOps, InputOutputAliasCount, DonatedBytes)."""
    counter_names = list(counter_names or [])
    asked = list(metric_names or _m.DEFAULT_SHORT_METRICS)
    aliases = [n for n in asked if n in METRIC_ALIASES]
    metric_names = [METRIC_ALIASES[n] if n in METRIC_ALIASES else n for n in asked]
    return _with_overlay(_m.short_report(counter_names, metric_names),
                         counter_names or _m.DEFAULT_SHORT_COUNTERS, aliases)


__getattr__ = unsupported_names(__name__)
