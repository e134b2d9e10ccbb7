"""Run PyTorch's OpInfo database on lazyxla and write the classification as JSON.

    python scripts/opinfo_report.py [--dtypes float32,int64] [--limit N] [--only NAME,...] [--out F]

Same harness as tests/ops/test_opinfo.py (tests/ops/opinfo_harness.py); this script
exists to measure the whole database in one process and print a table for docs/opinfo.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# this checkout's lazyxla, also from a git worktree whose package is not the installed one
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "tests", "ops")]

import torch  # noqa: E402

from opinfo_harness import entry_name, run_entry, summarize  # noqa: E402
from opinfo_skips import SKIPS  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dtypes", default="float32,int64")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--only", default="")
    p.add_argument("--out", default="opinfo_report.json")
    a = p.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db
    only = set(filter(None, a.only.split(",")))
    results = {}
    for op in op_db:
        name = entry_name(op)
        if (only and name not in only) or name in SKIPS:
            continue
        for dt_name in a.dtypes.split(","):
            dtype = getattr(torch, dt_name)
            if dtype not in op.supported_dtypes("cpu"):
                continue
            t = time.time()
            out = run_entry(op, dtype, a.limit)
            results[f"{name}|{dt_name}"] = dict(status=out.status, samples=out.samples, host=out.host_ops,
                                                error=out.error, seconds=round(time.time() - t, 2))
            print(f"{name:40s} {dt_name:9s} {out.status:14s} {time.time() - t:6.2f}s {' '.join(out.host_ops)} "
                  f"{out.error[:160]}", flush=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(summarize(results))


if __name__ == "__main__":
    main()
