"""The markdown report of a run: one table per workload family, ratios against
the JAX limit, the losses side by side, and the failures."""
from __future__ import annotations

from .flops import PEAK_FLOPS, mfu
from .plan import AMP_PREFIX, LAYERS_PREFIX, SYSTEMS, TRAINING, base_variant

LOSS_RTOL = 1e-3
# --amp rows compare with the bf16 JAX limit (else eager under autocast): one bf16
# rounding is 2**-8
LOSS_RTOL_AMP = 1e-2
MB = 2**20


def _get(rec, *path):
    """rec[p0][p1]... with None for anything missing (dict keys or list indices)."""
    for p in path:
        if isinstance(rec, dict):
            rec = rec.get(p)
        elif isinstance(rec, list) and isinstance(p, int) and -len(rec) <= p < len(rec):
            rec = rec[p]
        else:
            return None
    return rec


def _f(v, digits: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != 0 and abs(v) < 10 ** -digits:
            return f"{v:.2g}"
        return f"{v:,.{digits}f}"
    return str(v)


def _ratio(a, b) -> str:
    if a is None or b is None or not b:
        return "—"
    return f"{a / b:.2f}x"


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _by(records, workload, variant=""):
    return {r["system"]: r for r in records if r["workload"] == workload and r.get("variant", "") == variant}


def _ordered(cells: dict):
    return [cells[s] for s in SYSTEMS if s in cells]


def _status(r: dict) -> str:
    return "ok" if r.get("ok") else "FAILED"


def reference_loss_system(cells: dict) -> str | None:
    for s in ("jax", "eager"):
        if _get(cells, s, "losses"):
            return s
    return None


def loss0_rel_diff(r: dict, ref: dict | None):
    a, b = _get(r, "losses"), _get(ref, "losses") if ref else None
    if not a or not b:
        return None
    return abs(a[0] - b[0]) / max(abs(b[0]), 1e-12)


def _training_groups(records):
    """(row label, cells of one training variant by system, cells of its base variant
    (plan.base_variant), loss tolerance) in table order: the float32 cells of a workload,
    then its variants ("mlp[amp-bf16]", "accum[api]", "gpt[layers-16-scan]")."""
    for w in TRAINING:
        variants = sorted({r.get("variant", "") for r in records if r["workload"] == w})
        for v in variants:
            label = w + (f"[{v}]" if v else "")
            yield (label, _by(records, w, v), _by(records, w, base_variant(v)),
                   LOSS_RTOL_AMP if v.startswith(AMP_PREFIX) else LOSS_RTOL)


def _loss_reference(cells: dict, base: dict) -> tuple:
    """(system name, cells) whose losses a variant's are checked against: its own group's
    eager/JAX cell, else its base variant's (accum[api] and the scanned depths have only
    lazyxla)."""
    name = reference_loss_system(cells)
    if name is None:
        cells = base
        name = reference_loss_system(cells)
    return name, cells


def _training_cells(records):
    """(row label, record, the JAX limit's record of that workload) for W1/W2, in table
    order; a variant without a JAX limit of its own (W5's) is timed against the plain one."""
    for label, cells, base, _ in _training_groups(records):
        jax = cells.get("jax") or base.get("jax", {})   # --spmd rows: the same mesh's
        for r in _ordered(cells):
            yield label, r, jax


def device_kind(r: dict) -> str | None:
    return _get(r, "versions", "device_kind")


def headline_ms(r: dict):
    """A record's headline step time: the pipelined step of a training cell (steps with no
    wait between them, as training loops run: torch_loops._pipelined), else (W3, W4) the
    median step, each of which waits for the device."""
    pipelined = r.get("pipelined_ms")
    return pipelined if pipelined is not None else _get(r, "step_ms", "median")


def _mfu(r: dict) -> str:
    """The record's model FLOPs utilisation at its headline step, "n/a" where the device's
    peak is unknown (CPU)."""
    value = mfu(r.get("model_flops_per_step"), headline_ms(r), device_kind(r))
    return "n/a" if value is None else f"{value:.1%}"


def mfu_note(records) -> str:
    """What the MFU column divides by, for the devices of this run."""
    kinds = sorted({k for r in records if (k := device_kind(r)) and k != "cpu"})
    peaks = ", ".join(f"{k}: {PEAK_FLOPS[k] / 1e12:g} TFLOP/s" if k in PEAK_FLOPS else f"{k}: unknown (n/a)"
                      for k in kinds)
    return ("MFU: model FLOPs per step (6 · N · tokens + 12 · layers · d · seq · tokens, lazyxla/bench/flops.py) "
            "/ the pipelined step time (W1/W2; torch_loops._pipelined) / the device's peak bf16 FLOP/s" + (f" ({peaks})" if peaks else "") +
            "; float32 products count against the bf16 peak (one pass at the platform's default precision, "
            "several at \"highest\"); n/a on CPU.")


def training_table(records) -> str:
    """W1/W2 speed: the pipelined step (the headline) and its host share, the step that
    waits every time, both against the JAX limit timed the same way; MFU, tracing,
    compiles, graphs, and the device waits of a pipelined step."""
    rows = []
    for w, r, jax in _training_cells(records):
        if not r.get("ok"):
            rows.append([w, r["system"]] + ["—"] * 16 + ["FAILED (see below)"])
            continue
        rows.append([
            w, r["system"], _f(r.get("pipelined_ms")), _f(r.get("pipelined_host_ms")),
            _ratio(r.get("pipelined_ms"), jax.get("pipelined_ms")), _mfu(r),
            _f(_get(r, "step_ms", "median")), _f(_get(r, "step_ms", "min")),
            _ratio(_get(r, "step_ms", "median"), _get(jax, "step_ms", "median")),
            _f(_get(r, "trace_ms", "median")), _f(r.get("first_step_s"), 2), _f(r.get("warmup_compiles")),
            _f(r.get("compiles_per_step"), 2), _f(r.get("graphs_per_step"), 2),
            _f(r.get("traced_ops_per_step"), 0), _f(_get(r, "pipelined_counters", "device_waits"), 2),
            _f(r.get("fallbacks_per_step"), 1), _f(len(r.get("losses") or [])), "ok"])
    header = ["workload", "system", "step ms (pipelined)", "host ms/step", "× JAX", "MFU",
              "step ms, wait each (median)", "(min)", "× JAX (wait each)", "trace ms", "first step s",
              "warm-up compiles", "compiles/step", "graphs/step", "traced ops/step", "device waits/step (pipelined)",
              "host fallbacks/step", "steps run", "status"]
    return _table(header, rows)


def training_memory_table(records) -> str:
    """W1/W2 memory: process peak RSS against the JAX limit, donation, XLA's estimate."""
    rows = []
    for w, r, jax in _training_cells(records):
        if not r.get("ok"):
            continue
        peak_est = _get(r, "memory", "peak_estimate_bytes")
        rows.append([w, r["system"], _f(r.get("peak_rss_mb"), 0),
                     _ratio(r.get("peak_rss_mb"), jax.get("peak_rss_mb")), _f(r.get("steady_peak_rss_mb"), 0),
                     _f(r.get("rss_base_mb"), 0),
                     _f(r["peak_rss_mb"] - r["rss_base_mb"], 0) if r.get("peak_rss_mb") and r.get("rss_base_mb")
                     else "—",
                     _f(r.get("donors_per_graph")), _f(r.get("params_per_graph")),
                     _f(peak_est / MB, 1) if peak_est else "—",
                     " / ".join(_f(_get(r, "minor_faults_per_step", k), 0) for k in ("median", "max"))])
    header = ["workload", "system", "peak RSS MB", "RSS × JAX", "steady-state peak RSS MB", "RSS before step 0 MB",
              "peak − before MB", "donors/graph", "params/graph", "XLA peak estimate MB",
              "minor faults/step (median / max)"]
    return _table(header, rows)


def donate_table(records) -> str:
    rows = []
    for variant in ("alias-on", "alias-off"):
        cells = _by(records, "donate", variant)
        jax = cells.get("jax", {})
        for r in _ordered(cells):
            if not r.get("ok"):
                rows.append([r["system"], variant] + ["—"] * 8 + ["FAILED"])
                continue
            mb = r.get("tensor_mb")
            rows.append([r["system"], variant, _f(mb), _f(r.get("peak_delta_mb")),
                         _f(r["peak_delta_mb"] / mb, 2) + "x" if mb and r.get("peak_delta_mb") is not None else "—",
                         _f(_get(r, "step_ms", "median")), _f(_get(r, "step_ms", "min")),
                         _ratio(_get(r, "step_ms", "median"), _get(jax, "step_ms", "median")),
                         _f(r.get("first_step_s"), 3), _f(r.get("donors_per_graph")), _f(r.get("value_ok"))])
    header = ["system", "aliasing", "tensor MB", "peak Δ RSS MB", "Δ / tensor", "iter ms (median)", "iter ms (min)",
              "× JAX", "first iter s", "donors/graph", "value ok"]
    return _table(header, rows)


def trace_table(records) -> str:
    cells = _by(records, "trace")
    jax = cells.get("jax", {})
    rows = []
    for r in _ordered(cells):
        if not r.get("ok"):
            rows.append([r["system"]] + ["—"] * 10 + ["FAILED"])
            continue
        rows.append([r["system"], _f(r.get("ops")), _f(r.get("first_trace_us_per_op"), 2),
                     _f(_get(r, "trace_us_per_op", "median"), 2),
                     _f(_get(r, "trace_ms", "median"), 2), _f(_get(r, "sync_ms", "median"), 2),
                     _f(_get(r, "step_ms", "median"), 2),
                     _ratio(_get(r, "step_ms", "median"), _get(jax, "step_ms", "median")),
                     _f(r.get("first_step_s"), 3), _f(r.get("compiles_per_step"), 2), _f(r.get("graphs_per_step"), 2),
                     _f(r.get("result"), 5)])
    header = ["system", "ops", "µs per op, round 1", "µs per op (median)", "trace ms", "sync ms", "step ms", "× JAX", "first step s",
              "compiles/step", "graphs/step", "result[0]"]
    return _table(header, rows)


def depth_table(records) -> str:
    """--layers: W2's first step (trace, compile, run) and steady step against depth, per
    system and block form (loop, scan_layers, ScannedLayers)."""
    rows = []
    for r in records:
        variant = r.get("variant", "")
        if not variant.startswith(LAYERS_PREFIX):
            continue
        layers, _, form = variant[len(LAYERS_PREFIX):].partition("-")
        if not r.get("ok"):
            rows.append([layers, form or "loop", r["system"]] + ["—"] * 6 + ["FAILED"])
            continue
        rows.append([layers, form or "loop", r["system"], _f(r.get("first_step_s"), 2),
                     _f(_get(r, "first_step_counters", "compile_s"), 2), _f(r.get("pipelined_ms")),
                     _f(_get(r, "trace_ms", "median")), _f(r.get("peak_rss_mb"), 0), _f(_get(r, "losses", -1), 4),
                     "ok"])
    header = ["layers", "blocks", "system", "first step s", "its compile s", "step ms (pipelined)", "trace ms",
              "peak RSS MB", "last loss", "status"]
    return _table(header, sorted(rows, key=lambda row: int(row[0])))


def phases_table(records) -> str:
    """--phases: host ms per step by stage of lx.debug.host_timeline (torch_loops._phases),
    steady (a pipelined block) and in the first step, the steady step's largest first."""
    rows = []
    for r in records:
        steady, first = r.get("phases") or {}, r.get("first_step_phases") or {}
        label = r["workload"] + (f"[{r['variant']}]" if r.get("variant") else "")
        for phase in sorted(set(steady) | set(first), key=lambda p: -_get(steady, p, "ms") if p in steady else 0):
            rows.append([label, r["system"], phase, _f(_get(steady, phase, "count"), 2),
                         _f(_get(steady, phase, "ms"), 3), _f(_get(first, phase, "count"), 0),
                         _f(_get(first, phase, "ms"), 1)])
    header = ["workload", "system", "phase", "count/step", "ms/step", "first step: count", "first step: ms"]
    return _table(header, rows)


def memory_table(records) -> str:
    rows = []
    for r in records:
        m = r.get("memory")
        if not r.get("ok") or not m:
            continue
        label = r["workload"] + (f" [{r['variant']}]" if r.get("variant") else "")
        rows.append([label, r["system"]] + [_f(m.get(k, 0) / MB, 1) for k in (
            "argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes",
            "peak_estimate_bytes")])
    header = ["workload", "system", "arguments MB", "outputs MB", "temporaries MB", "aliased MB", "peak estimate MB"]
    return _table(header, rows) if rows else "(no memory analysis recorded)"


def loss_table(records) -> str:
    rows = []
    for w, cells, base, rtol in _training_groups(records):
        ref_name, ref_cells = _loss_reference(cells, base)
        ref = ref_cells.get(ref_name or "", {}).get("losses") or []
        for r in _ordered(cells):
            losses = r.get("losses") or []
            if not losses:
                continue
            n = min(len(losses), len(ref))
            worst = max((abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses[:n], ref[:n])), default=None)
            diff0 = loss0_rel_diff(r, ref_cells.get(ref_name or ""))
            check = "—" if diff0 is None else ("ok" if diff0 <= rtol else "MISMATCH")
            rows.append([w, r["system"], _f(losses[0], 5), _f(losses[1], 5) if len(losses) > 1 else "—",
                         _f(losses[-1], 5), len(losses), f"{diff0:.1e}" if diff0 is not None else "—", check,
                         f"{worst:.1e}" if worst is not None else "—", ref_name or "—"])
    header = ["workload", "system", "loss step 0", "loss step 1", "loss last step", "steps", "step-0 rel. diff",
              f"step 0 within {LOSS_RTOL:g} ({LOSS_RTOL_AMP:g} amp)", "max rel. diff (all steps)", "reference"]
    return _table(header, rows) if rows else "(no losses recorded)"


def failures(records) -> str:
    lines = []
    for r in records:
        if not r.get("ok"):
            label = r["workload"] + (f"[{r['variant']}]" if r.get("variant") else "") + "/" + r["system"]
            err = str(r.get("error") or "").strip().splitlines()
            lines.append(f"- `{label}`: {err[0][:400] if err else 'unknown error'}"
                         + (f" (log: `{r['log']}`)" if r.get("log") else ""))
    return "\n".join(lines)


def fallback_notes(records) -> str:
    ops = sorted({f"{r['workload']}/{r['system']}: {', '.join(r['fallback_ops'])}"
                  for r in records if r.get("fallback_ops")})
    return "\n".join(f"- {o}" for o in ops)


def checks(records) -> list[str]:
    """Problems a reader must not miss: failed cells and step-0 loss mismatches."""
    out = []
    for w, cells, base, rtol in _training_groups(records):
        ref_name, ref_cells = _loss_reference(cells, base)
        for r in _ordered(cells):
            diff = loss0_rel_diff(r, ref_cells.get(ref_name or ""))
            if diff is not None and diff > rtol:
                out.append(f"{w}/{r['system']}: step-0 loss differs from {ref_name} by {diff:.1e} (relative)")
    out += [f"{r['workload']}{'[' + r['variant'] + ']' if r.get('variant') else ''}/{r['system']} failed"
            for r in records if not r.get("ok")]
    return out


def compile_split_table(records) -> str:
    """Compiled mode: where the compile seconds of a cell went (sys_lazyxla.CompiledBackend),
    beside its first step."""
    rows = []
    for r in records:
        split = r.get("compile_split_s")
        if not split:
            continue
        label = r["workload"] + (f"[{r['variant']}]" if r.get("variant") else "")
        rows.append([label, r["system"], _f(r.get("first_step_s"), 2), _f(split["dynamo"], 2),
                     _f(split["backend"], 2), _f(split["aot"], 2), _f(split["xla"], 2)])
    header = ["workload", "system", "first step s", "dynamo s", "of which the backend call s",
              "of which AOTAutograd s", "XLA compiles s"]
    return _table(header, rows)


def render(records, meta: dict) -> str:
    parts = [f"# lazyxla benchmark ({meta.get('mode', '?')} mode)", "",
             " · ".join(f"{k}: {v}" for k, v in meta.items() if k != "mode" and v not in (None, "")), ""]
    if any(r["workload"] in TRAINING for r in records):
        parts += ["## W1 mlp / W2 gpt / W5 accum (W2 over micro-batches): training step", "", training_table(records), "",
                  mfu_note(records), "",
                  "### Memory", "", training_memory_table(records), "",
                  "### Losses (all systems train the same)", "", loss_table(records), ""]
    if any(r.get("variant", "").startswith(LAYERS_PREFIX) for r in records):
        parts += ["## Depth: W2's first step and step against layers", "", depth_table(records), ""]
    if any(r.get("compile_split_s") for r in records):
        parts += ["## Compiled mode: where the compile seconds go", "",
                  "dynamo's frame compiles include the backend call (AOTAutograd and lazyxla's capture "
                  "of each graph); XLA's compiles of the step's executables come after, at the barrier.",
                  "", compile_split_table(records), ""]
    if any(r.get("phases") for r in records):
        parts += ["## Host phases per step (lx.debug.host_timeline)", "",
                  "`trace` is the program's Python and lazyxla's tracing between syncs, the sync kinds "
                  "(step barrier, implied step barrier) enclose their stages (collect, plan, key and cache, "
                  "compile, dispatch, install), `device` is the graphs from launch to ready, "
                  "`collector:...` Python's garbage collections; the first step's tracing before its first "
                  "sync is its `trace ms` above.", "", phases_table(records), ""]
    if any(r["workload"] == "donate" for r in records):
        parts += ["## W3 donate: in-place update of one big tensor", "", donate_table(records), ""]
    if any(r["workload"] == "trace" for r in records):
        parts += ["## W4 trace: chained elementwise ops", "", trace_table(records), ""]
    parts += ["## XLA memory analysis of the step graph", "", memory_table(records), ""]
    notes = fallback_notes(records)
    if notes:
        parts += ["## Ops run on the host (lazyxla fallbacks)", "", notes, ""]
    fails = failures(records)
    if fails:
        parts += ["## Failures", "", fails, ""]
    return "\n".join(parts)
