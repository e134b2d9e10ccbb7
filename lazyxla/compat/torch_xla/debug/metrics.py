"""`torch_xla.debug.metrics` (met): lx.metrics under upstream's names. Counter and
metric names are upstream's where lazyxla has the same quantity (API.md
"Introspection"); lazyxla-only ones (TracedOps, DonatedBytes) appear too."""
from __future__ import annotations

from typing import Iterable, Optional

from lazyxla import metrics as _m
from lazyxla.metrics import (clear_all, clear_counters, clear_metrics, counter_names,  # noqa: F401
                             counter_value, metric_data, metric_names)

from ...unsupported import unsupported_names


def metrics_report() -> str:
    return _m.report()


def short_metrics_report(counter_names: Optional[Iterable[str]] = None,
                         metric_names: Optional[Iterable[str]] = None) -> str:
    """lx.metrics.short_report: falsy arguments mean lazyxla's default names (upstream's
    defaults plus UncachedCompile, TracedOps, InputOutputAliasCount, DonatedBytes)."""
    return _m.short_report(counter_names, metric_names)


__getattr__ = unsupported_names(__name__)
