"""The PNG chart: step time and peak memory per workload and system. Optional: without
matplotlib the run writes everything else and says how to draw the chart afterwards,
from its results.jsonl (`python -m lazyxla.bench.chart OUT_DIR`)."""
from __future__ import annotations

import json
import os
import sys

from .plan import SYSTEMS
from .report import headline_ms

CHART = "bench.png"

COLORS = {"lazyxla": "#d62728", "lazyxla_compiled": "#9467bd", "eager": "#7f7f7f", "jax": "#1f77b4", "torch_xla": "#ff7f0e"}


def _groups(records):
    """(label, {system: (step ms, memory MB)}) per workload (and variant: W3's aliasing,
    --amp), in run order."""
    groups: dict[str, dict] = {}
    for r in records:
        if not r.get("ok"):
            continue
        label = r["workload"] + (f"\n{r['variant']}" if r.get("variant") else "")
        mem = r.get("peak_delta_mb") if r["workload"] == "donate" else r.get("peak_rss_mb")
        step = headline_ms(r)
        groups.setdefault(label, {})[r["system"]] = (step, mem)
    return list(groups.items())


def save_chart(records, path: str, title: str = "lazyxla benchmark") -> str | None:
    """Write the chart to `path`; None (and nothing written) when no cell succeeded."""
    groups = _groups(records)
    if not groups:
        return None
    # optional: matplotlib, needed for the chart only
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # optional: as matplotlib above, after choosing its backend

    systems = [s for s in SYSTEMS if any(s in g for _, g in groups)]
    width = 0.8 / max(len(systems), 1)
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(max(7, 1.6 * len(groups) + 2), 8))
    for k, s in enumerate(systems):
        xs = [i + (k - (len(systems) - 1) / 2) * width for i in range(len(groups))]
        for ax, idx in ((ax_t, 0), (ax_m, 1)):
            vals = [g.get(s, (None, None))[idx] for _, g in groups]
            bars = ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None],
                          width, label=s, color=COLORS.get(s))
            ax.bar_label(bars, fmt="%.0f" if idx else "%.3g", fontsize=6, padding=1)
    step_labels = [label for label, _ in groups]
    mem_labels = [label + ("\n(peak Δ RSS)" if label.startswith("donate") else "\n(peak RSS)") for label, _ in groups]
    ax_t.set_yscale("log")
    ax_t.set_ylabel("step / iteration ms (median, log)")
    ax_m.set_ylabel("peak memory MB")
    for ax, labels in ((ax_t, step_labels), (ax_m, mem_labels)):
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    ax_t.legend(ncol=len(systems), fontsize=8)
    ax_t.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart_or_note(records, out_dir: str, title: str) -> tuple[str | None, str | None]:
    """(path of the chart drawn into `out_dir`, None), or (None, a note saying how to get
    it) where matplotlib is not installed; (None, None) when no cell succeeded."""
    try:
        # optional: matplotlib, needed for the chart only
        import matplotlib  # noqa: F401
    except ImportError:
        return None, (f"no chart: matplotlib is not installed (optional). Install it (`python -m pip install "
                      f"matplotlib`), then draw it from the results: python -m lazyxla.bench.chart {out_dir}")
    return save_chart(records, os.path.join(out_dir, CHART), title), None


def main(argv=None) -> int:
    """Draw OUT_DIR/bench.png from OUT_DIR/results.jsonl of an earlier run."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m lazyxla.bench.chart OUT_DIR", file=sys.stderr)
        return 2
    out_dir = argv[0]
    with open(os.path.join(out_dir, "results.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    path = save_chart(records, os.path.join(out_dir, CHART))
    print(f"wrote {path}" if path else "no cell succeeded: no chart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
