"""Child side: measure one cell and write its JSON record (see child.py)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import warnings

from . import measure as M
from .plan import Cell, Settings


def _torch_backend(system: str):
    if system == "lazyxla":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from .sys_lazyxla import Backend
    elif system == "lazyxla_compiled":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from .sys_lazyxla import CompiledBackend as Backend
    elif system == "eager":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from .sys_eager import Backend
    elif system == "torch_xla":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from .sys_torch_xla import Backend
    else:
        raise ValueError(f"unknown system {system!r}")
    return Backend


def run_cell(cell: Cell, settings: Settings) -> dict:
    """The measurements of one cell; raises what the system raises."""
    settings = cell.settings(settings)
    if cell.system == "jax":
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from . import jax_limit
        return jax_limit.run(cell, settings)
    # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
    from . import torch_loops
    backend = _torch_backend(cell.system)(cell)
    backend.set_matmul_precision(settings.matmul_precision)
    rec = torch_loops.RUNNERS[cell.workload](backend, cell, settings)
    rec["versions"] = backend.versions()
    return rec


def measure_cell(cell: Cell, settings: Settings) -> dict:
    """`run_cell` wrapped: never raises; errors and host-fallback warnings are recorded."""
    rec = {**cell.to_dict(), "mode": settings.mode, "ok": False, "error": None,
           "python": sys.version.split()[0], "host": platform.node(), "cpus": M.cpu_count()}
    for path_key in ("npz", "trace_input"):   # input files of the JAX limit, not results
        rec.pop(path_key, None)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            rec.update(run_cell(cell, settings))
            rec["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - the record must say what went wrong
            rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            rec["traceback"] = traceback.format_exc()[-6000:]
    rec["warnings"] = sorted({str(w.message)[:300] for w in caught})[:50]
    if rec.get("peak_rss_mb") is None:   # W3/W4 and failed cells: peak since the last reset
        rec["peak_rss_mb"] = round(M.peak_rss_mb(), 1)
    rec["cell_s"] = round(time.perf_counter() - start, 3)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cell", required=True, help="JSON of the cell (workload, system, variant, extra)")
    ap.add_argument("--settings", required=True, help="JSON of the Settings")
    ap.add_argument("--out", required=True, help="where to write the JSON record")
    args = ap.parse_args(argv)
    c = json.loads(args.cell)
    cell = Cell(c.pop("workload"), c.pop("system"), c.pop("variant", ""), c)
    rec = measure_cell(cell, Settings.from_dict(json.loads(args.settings)))
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, args.out)
    return 0
