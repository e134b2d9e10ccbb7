"""W2 (gpt) step time by op family: XLA:CPU running lazyxla's graphs against eager PyTorch.

    python scripts/w2_op_families.py [--steps N] [--repeats R] [--xla-only | --eager-only]

Both sides are classified by the ATen op that produced the work, with one table
(`family`), so the two columns compare like with like:

* eager: torch.profiler over N steady steps; each ATen op's self CPU time, the
  optimizer step's ops counted as "optimizer" (a record_function around it).
* lazyxla: the step runs as two graphs (model forward+backward, optimizer step:
  a sync between them so the optimizer's work is a module of its own), each node
  lowered under `jax.named_scope(<aten op>)`, so XLA's HLO metadata names the ATen
  op of every instruction. jax.profiler records XLA:CPU's per-thunk execution
  times (a thunk is one top-level HLO instruction: a fusion, a dot, a copy); a
  thunk is classified by the ATen ops in it (a fusion with a dot counts as
  matmul, see `_instruction_family`).

Thunk times are summed per family; XLA:CPU may run independent thunks at the
same time on its worker threads, so the sum can exceed the wall time, which is
printed beside it. Each measurement is repeated R times, eager and lazyxla
interleaved; the tables are medians. Timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import statistics
import tempfile
import time

import jax
import torch

import lazyxla as lx
from lazyxla import workloads
from lazyxla.compile import cache, program

FAMILIES = {
    "matmul": {"mm", "addmm", "bmm", "matmul", "linear", "baddbmm", "dot", "dot_general"},
    "softmax": {"_softmax", "softmax", "_softmax_backward_data", "_safe_softmax"},
    "layer_norm": {"native_layer_norm", "native_layer_norm_backward", "layer_norm"},
    "loss": {"_log_softmax", "log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
             "nll_loss_backward", "nll_loss", "nll_loss_nd", "cross_entropy_loss"},
    "embedding": {"embedding", "embedding_dense_backward", "embedding_backward", "index_select",
                  "index_add", "index_put", "_index_put_impl_", "gather", "scatter_add", "scatter"},
    "layout/copy": {"t", "transpose", "view", "_unsafe_view", "reshape", "permute", "expand", "clone",
                    "copy_", "copy", "contiguous", "split", "split_with_sizes", "slice", "select", "cat",
                    "stack", "unsqueeze", "squeeze", "as_strided", "empty_like", "zeros_like", "_to_copy",
                    "to", "detach", "alias", "_reshape_alias", "unbind", "view_scatter"},
    "reduction": {"sum", "mean", "amax", "max", "min"},
}
ORDER = ["matmul", "softmax", "layer_norm", "loss", "embedding", "elementwise", "reduction",
         "layout/copy", "optimizer", "other"]
_FAMILY_OF = {op: fam for fam, ops in FAMILIES.items() for op in ops}


def family(aten_name: str) -> str:
    """"aten::addmm", "aten.mm.default", "_foreach_mul_" -> a family name."""
    base = aten_name.replace("aten::", "").replace("aten.", "").split(".")[0]
    if base.startswith("_foreach_"):
        return "optimizer"
    if base.endswith("_") and base[:-1] in _FAMILY_OF:
        base = base[:-1]
    return _FAMILY_OF.get(base, "elementwise")


# --- eager ---------------------------------------------------------------------------------

def eager_families(steps: int) -> tuple[dict, float]:
    """({family: ms per step of ATen self time}, wall ms per step)."""
    wl = workloads.make("gpt")
    model, opt = wl.model, wl.optimizer(wl.model.parameters(), foreach=True)

    def step() -> None:
        opt.zero_grad()
        wl.loss(model, wl.inputs, wl.targets).backward()
        with torch.profiler.record_function("PHASE:optimizer"):
            opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    out: dict = collections.Counter()
    for ev in prof.events():
        if not ev.name.startswith("aten::") or ev.self_cpu_time_total <= 0:
            continue
        parent, phase = ev.cpu_parent, None
        while parent is not None:
            if parent.name.startswith("PHASE:"):
                phase = parent.name[len("PHASE:"):]
            parent = parent.cpu_parent
        out[phase or family(ev.name)] += ev.self_cpu_time_total / 1e3 / steps
    return dict(out), wall


# --- lazyxla on XLA:CPU -------------------------------------------------------------------

_PHASE = ["model"]


def _scoped_apply(original):
    def apply(rule, ctx, args, kwargs):
        with jax.named_scope(str(ctx.op)):
            return original(rule, ctx, args, kwargs)
    return apply


def _named_build(original):
    def build(graph):
        fn, n_params = original(graph)
        fn.__name__ = f"lazyxla_{_PHASE[0]}"   # the HLO module: jit_lazyxla_model / _optimizer
        return fn, n_params
    return build


_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = .*$")
_OPNAME = re.compile(r'op_name="([^"]+)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+) .*\{\s*$")
_PRIORITY = ["matmul", "softmax", "layer_norm", "loss", "embedding", "reduction", "elementwise", "layout/copy"]


def _aten_of(op_name: str) -> str | None:
    """The ATen op in an HLO op_name path, e.g. jit(f)/aten.mm.default/dot_general."""
    for part in op_name.split("/"):
        if part.startswith("aten.") or part == "view_scatter":
            return part
    return None


def _instruction_families(hlo_text: str) -> dict:
    """{instruction name: family} for the top-level instructions of an optimized module:
    a fusion by the ATen ops inside it, the first of _PRIORITY that occurs."""
    comps: dict = collections.defaultdict(list)   # computation -> [(name, op_name, calls)]
    current = None
    for line in hlo_text.splitlines():
        m = _COMP.match(line)
        if m and "=" not in line.split("{")[0]:
            current = m.group(1)
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            op = _OPNAME.search(line)
            calls = _CALLS.search(line)
            comps[current].append((m.group(1), op.group(1) if op else "", calls.group(1) if calls else None))

    def fams(comp: str, seen: set) -> set:
        out = set()
        for _, op_name, calls in comps.get(comp, ()):
            aten = _aten_of(op_name)
            if aten:
                out.add(family(aten))
            if calls and calls not in seen:
                seen.add(calls)
                out |= fams(calls, seen)
        return out

    result = {}
    for comp, instrs in comps.items():
        for name, op_name, calls in instrs:
            found = fams(calls, {calls}) if calls else set()
            aten = _aten_of(op_name)
            if aten:
                found.add(family(aten))
            result[name] = next((f for f in _PRIORITY if f in found), "other")
    return result


def xla_families(steps: int, trace_dir: str) -> tuple[dict, float, float]:
    """({family: ms per step of thunk time}, wall ms per step, thunk ms per step)."""
    wl = workloads.make("gpt")
    dev = lx.device()
    model = wl.model.to(dev)
    x, y = wl.inputs.to(dev), wl.targets.to(dev)
    opt = wl.optimizer(model.parameters(), foreach=True)

    def step() -> None:
        opt.zero_grad()
        wl.loss(model, x, y).backward()
        _PHASE[0] = "model"
        lx.sync()
        opt.step()
        _PHASE[0] = "optimizer"
        lx.sync()

    for _ in range(4):
        step()
    lx.wait_device_ops()
    t0 = time.perf_counter()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(steps):
            step()
        lx.wait_device_ops()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    fam_of = {}
    for exe in cache._cache.values():
        text = exe.compiled.as_text()
        module = re.search(r"HloModule ([\w.\-]+)", text).group(1)
        phase = "optimizer" if "optimizer" in module else None
        for name, fam in _instruction_families(text).items():
            fam_of[(module, name)] = phase or fam
    path = sorted(glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True))[-1]
    data = json.load(gzip.open(path))
    events = data["traceEvents"] if isinstance(data, dict) else data
    out: dict = collections.Counter()
    for ev in events:
        args = ev.get("args") or {}
        if ev.get("ph") == "X" and "hlo_op" in args and "lazyxla" in args.get("hlo_module", ""):
            key = (args["hlo_module"], args["hlo_op"])
            out[fam_of.get(key, "other")] += ev["dur"] / 1e3 / steps
    return dict(out), wall, sum(out.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--xla-only", action="store_true")
    ap.add_argument("--eager-only", action="store_true")
    a = ap.parse_args()
    program._apply = _scoped_apply(program._apply)   # before the first compile
    cache.build = _named_build(cache.build)
    eager, xla, walls = [], [], collections.defaultdict(list)
    for _ in range(a.repeats):   # interleaved: a load change hits both sides alike
        if not a.xla_only:
            fams, wall = eager_families(a.steps)
            eager.append(fams)
            walls["eager wall"].append(wall)
        if not a.eager_only:
            with tempfile.TemporaryDirectory() as d:
                fams, wall, total = xla_families(a.steps, d)
            xla.append(fams)
            walls["lazyxla wall (2 graphs)"].append(wall)
            walls["lazyxla thunk sum"].append(total)
    med = lambda runs, f: statistics.median(r.get(f, 0.0) for r in runs) if runs else float("nan")  # noqa: E731
    print(f"{'family':<14}{'eager ms':>10}{'XLA:CPU ms':>12}{'ratio':>8}")
    for f in ORDER:
        e, x = med(eager, f), med(xla, f)
        if (e or 0) < 0.05 and (x or 0) < 0.05:
            continue
        ratio = x / e if e and e == e and x == x else float("nan")
        print(f"{f:<14}{e:>10.1f}{x:>12.1f}{ratio:>8.2f}")
    for k, v in walls.items():
        print(f"{k}: median {statistics.median(v):.1f} ms/step over {len(v)} runs ({', '.join(f'{t:.0f}' for t in v)})")


if __name__ == "__main__":
    main()
