"""Run one PyTorch OpInfo entry (`op_db`) on lazyxla and classify it against eager CPU.

For each sample the eager result on CPU is the reference; the same sample moved to the
lazyxla device must give it within atol 1e-3 / rtol 1e-5 (torchax's tolerances; wider
for bfloat16), same dtype and shape. A sample passes *traced* when no op of it ran
through the host fallback: lazyxla counts every host run in a `<namespace>::<op>`
counter (frontend/fallback.py), so the counters before and after tell.

Outputs that are not unique (SVD's singular vectors, ...) are compared as PyTorch's own
OpInfo tests compare them: through the sample's `output_process_fn_grad`, which maps
them to a unique function of themselves (U @ Vh, |U|, ...). Random and uninitialised
ops are compared by shape and dtype only (opinfo_skips.SHAPE_ONLY).
"""
from __future__ import annotations

import dataclasses
import gc
import warnings
from typing import Iterable, Optional

import torch
from torch.utils import _pytree as pytree

import lazyxla as lx
from lazyxla.errors import StorageRangeError
from opinfo_skips import CPU_ARGS, INDEX_TIES, SHAPE_ONLY, SHAPE_ONLY_SAMPLES, TOLERANCES

TRACED, HOST, FAIL, NO_SAMPLES = "pass traced", "pass via host", "fail", "no samples"
# every sample holds integers the storage dtype policy refuses (the TPU's default keeps int64
# in int32 and raises on values beyond it, by design: docs/design.md, "64-bit types on the TPU")
POLICY_REFUSED = "refused by the storage policy"
EXPECTED_FAIL = "expected fail"  # a strict xfail of test_opinfo.py (opinfo_skips.EXPECTED_FAILS)
ATOL, RTOL = 1e-3, 1e-5
# What this process's OpInfo tests found, {"entry|dtype": {"status": ...}}, for the summary.
RESULTS: dict = {}
BATCH = 8  # samples per graph (see _run_batched)
BF16_ATOL, BF16_RTOL = 1e-2, 1.6e-2  # bfloat16 keeps 8 mantissa bits (torch's own bf16 tolerance)


@dataclasses.dataclass
class Outcome:
    status: str
    samples: int = 0
    host_ops: tuple = ()
    error: str = ""
    refused: int = 0   # samples the storage policy refused (POLICY_REFUSED)


def entry_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def fallback_counts() -> dict:
    """Host-fallback runs so far, per op: lazyxla's `namespace::op` counters."""
    return {n: lx.metrics.counter_value(n) for n in lx.metrics.counter_names() if "::" in n}


def _to(value, device):
    def move(t: torch.Tensor) -> torch.Tensor:
        if t.layout != torch.strided:
            return t
        return t.detach().to(device)
    return pytree.tree_map_only(torch.Tensor, move, value)


def _clone(value):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone() if t.layout == torch.strided else t,
                                value)


def _compare(actual, expected, atol: float, rtol: float, shape_only: bool) -> None:
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    if len(exp_leaves) != len(act_leaves):
        raise AssertionError(f"output structure {act_spec} != {exp_spec}")
    for a, e in zip(act_leaves, exp_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"expected a tensor, got {type(a).__name__}")
            a = a.detach().cpu()
            if a.dtype != e.dtype or a.shape != e.shape:
                raise AssertionError(f"dtype/shape {a.dtype}{list(a.shape)} != {e.dtype}{list(e.shape)}")
            if not shape_only:
                torch.testing.assert_close(a, e.detach(), atol=atol, rtol=rtol, equal_nan=True)
        elif not shape_only and a != e and not (e != e and a != a):
            raise AssertionError(f"{a!r} != {e!r}")


def _prepare(op, sample):
    """Eager's result on the CPU and lazyxla's, still pending, for one sample; None when
    eager itself refuses the sample (nothing to compare with)."""
    dev = lx.device()
    if entry_name(op) in CPU_ARGS:  # the op wants its other tensor arguments on the CPU
        on_dev = (_to(sample.input, dev), sample.args, sample.kwargs)
    else:
        on_dev = _to((sample.input, sample.args, sample.kwargs), dev)
    if "device" in on_dev[2]:  # factories: samples name the CPU as the device to create on
        on_dev = (on_dev[0], on_dev[1], {**on_dev[2], "device": dev})
    inp, args, kwargs = _clone((sample.input, sample.args, sample.kwargs))
    try:
        expected = sample.output_process_fn_grad(op(inp, *args, **kwargs))
    except Exception:  # noqa: BLE001
        return None
    return expected, sample.output_process_fn_grad(op(on_dev[0], *on_dev[1], **on_dev[2]))


def _check(op, sample, dtype, shape_only: bool, actual, expected) -> None:
    """Compare one sample's results; raises AssertionError on a mismatch."""
    atol, rtol = TOLERANCES.get(entry_name(op), (ATOL, RTOL))
    if dtype == torch.bfloat16:
        atol, rtol = max(atol, BF16_ATOL), max(rtol, BF16_RTOL)
    ties = INDEX_TIES.get(entry_name(op))
    if ties is not None:
        _check_tied_indices(sample, ties, actual)
        actual, expected = actual[0], expected[0]
    random_sample = SHAPE_ONLY_SAMPLES.get(entry_name(op))
    shape_only = shape_only or (random_sample is not None and random_sample(sample))
    try:
        _compare(actual, expected, atol, rtol, shape_only)
    except AssertionError:
        if dtype != torch.bfloat16 or not _no_less_accurate(op, sample, actual, expected, atol, rtol):
            raise


def _no_less_accurate(op, sample, actual, expected, atol: float, rtol: float) -> bool:
    """Whether every bfloat16 element of lazyxla's result that differs from eager's is
    at least as close as eager's to the same sample computed in float64.

    Eager rounds some bfloat16 intermediates that XLA keeps in float32 (or the other way
    round: c10::BFloat16 arithmetic rounds each step, vectorised kernels do not), so a
    cancellation or a value next to a rounding boundary (trunc(2.999)) differs by more
    than the bf16 tolerance while both are honest roundings. Measured against a float64
    reference, a wrong lowering still fails; a more accurate one passes."""
    up = pytree.tree_map_only(torch.Tensor, lambda t: t.double() if t.dtype == torch.bfloat16 else t,
                              _clone((sample.input, sample.args, sample.kwargs)))
    try:
        reference = sample.output_process_fn_grad(op(up[0], *up[1], **up[2]))
    except Exception:  # noqa: BLE001  (no float64 reference: the plain comparison stands)
        return False
    ref_leaves = pytree.tree_leaves(reference)
    exp_leaves, act_leaves = pytree.tree_leaves(expected), pytree.tree_leaves(actual)
    if len(ref_leaves) != len(exp_leaves):
        return False
    for a, e, r in zip(act_leaves, exp_leaves, ref_leaves):
        if not isinstance(e, torch.Tensor) or e.dtype != torch.bfloat16:
            _compare(a, e, atol, rtol, False)
            continue
        if not isinstance(r, torch.Tensor) or r.shape != e.shape:
            return False
        a, e, r = a.detach().cpu().double(), e.detach().double(), r.detach().double()
        same = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        right = torch.isclose(a, r, rtol=rtol, atol=atol, equal_nan=True)  # also where eager's is NaN
        as_good = (a - r).abs() <= (e - r).abs() + atol + rtol * r.abs()
        if not bool((same | right | as_good).all()):
            return False
    return True


def run_sample(op, sample, dtype, shape_only: bool) -> bool:
    """One sample on lazyxla vs eager, synced on its own; raises AssertionError (or the
    op's error) on a mismatch. False when eager refuses the sample."""
    results = _prepare(op, sample)
    if results is None:
        return False
    _check(op, sample, dtype, shape_only, results[1], results[0])
    return True


def _run_batched(op, dtype, shape_only: bool, limit: Optional[int]) -> int:
    """Samples traced BATCH at a time into one graph, synced once and compared: one
    XLA compile per batch instead of one per sample (the compile's fixed cost is most
    of a small sample's time; a graph of hundreds of samples compiles superlinearly
    slower). Returns how many samples ran; raises at the first error."""
    n = 0
    batch: list = []
    for sample in samples(op, dtype, limit):
        results = _prepare(op, sample)
        if results is not None:
            batch.append((sample, *results))
        if len(batch) == BATCH:
            n += _check_batch(op, dtype, shape_only, batch)
            batch = []
    return n + _check_batch(op, dtype, shape_only, batch)


def _check_batch(op, dtype, shape_only: bool, batch: list) -> int:
    lazy = [t for _, _, actual in batch for t in pytree.tree_leaves(actual)
            if isinstance(t, torch.Tensor) and t.device.type == lx.device().type]
    if lazy:
        lx.sync_tensors(lazy)
    for sample, expected, actual in batch:
        _check(op, sample, dtype, shape_only, actual, expected)
    return len(batch)


def _check_tied_indices(sample, ties: tuple, actual) -> None:
    """Each returned index must point at an element equal to the returned value."""
    pos, default = ties
    dim = sample.args[pos] if len(sample.args) > pos else sample.kwargs.get("dim", default)
    values, indices = (t.detach().cpu() for t in actual)
    x = sample.input
    if x.dim() == 0:
        picked = x
    else:
        keepdim = values.dim() == x.dim()
        idx = indices if keepdim else indices.unsqueeze(dim)
        picked = x.gather(dim, idx)
        picked = picked if keepdim else picked.squeeze(dim)
    torch.testing.assert_close(picked, values, atol=0, rtol=0, equal_nan=True,
                               msg=lambda m: f"indices do not point at the values: {m}")


def samples(op, dtype, limit: Optional[int]) -> Iterable:
    for i, s in enumerate(op.sample_inputs("cpu", dtype, requires_grad=False)):
        if limit is not None and i >= limit:
            return
        yield s


def run_entry(op, dtype, limit: Optional[int] = None) -> Outcome:
    """All (or the first `limit`) samples of `op` in `dtype`, batched (see _run_batched);
    if that fails, sample by sample, so that the error is the first failing sample's own
    (a graph that fails to compile would otherwise blame the whole batch)."""
    shape_only = entry_name(op) in SHAPE_ONLY
    before = fallback_counts()
    refused = [0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n, error = _attempt(lambda: _run_batched(op, dtype, shape_only, limit))
        if error:
            n, error = _attempt(lambda: sum(_run_unless_refused(op, s, dtype, shape_only, refused)
                                            for s in samples(op, dtype, limit)))
            if error or not refused[0]:
                return Outcome(FAIL, n, error=error or "failed with all samples in one graph, passed one by one")
    if n == 0:
        return Outcome(POLICY_REFUSED, refused=refused[0]) if refused[0] else Outcome(NO_SAMPLES)
    after = fallback_counts()
    host = tuple(sorted(k for k, v in after.items() if v != before.get(k)))
    return Outcome(HOST if host else TRACED, n, host, refused=refused[0])


def _run_unless_refused(op, sample, dtype, shape_only: bool, refused: list) -> bool:
    """`run_sample`, counting in `refused[0]` a sample whose integers the storage dtype policy
    cannot hold (its `StorageRangeError` is the documented behaviour, not a lowering's failure)."""
    try:
        return run_sample(op, sample, dtype, shape_only)
    except StorageRangeError:
        refused[0] += 1
        return False


def _attempt(run) -> tuple:
    """(samples run, "") or (0, the error), leaving nothing pending behind: after an
    error the failed samples' tensors (held by the traceback's frames until collected)
    are dropped, so a graph that cannot compile does not also fail the next entry's sync."""
    try:
        n = run()
        lx.sync(wait=True)
        return n, ""
    except Exception as e:  # noqa: BLE001  (any error of the op is a failure of the entry)
        error = f"{type(e).__name__}: {str(e).strip()[:400]}"
    gc.collect()
    lx.sync(wait=True)
    return 0, error


_RANK = {TRACED: 0, HOST: 1, FAIL: 2}


def summarize(results: dict, headline_dtypes=("float32", "int64")) -> str:
    """A text table from {"entry|dtype": {"status": ...}}: counts per dtype, and per entry
    over `headline_dtypes` (an entry passes traced when each of its dtypes does; the
    issue's numbers)."""
    per_dtype: dict = {}
    per_entry: dict = {}
    expected = 0
    for key, r in results.items():
        name, dt = key.split("|")
        status = r["status"]
        expected += status == EXPECTED_FAIL
        if status not in _RANK:
            continue
        per_dtype.setdefault(dt, {TRACED: 0, HOST: 0, FAIL: 0})[status] += 1
        if dt in headline_dtypes:
            worst = per_entry.get(name, TRACED)
            per_entry[name] = status if _RANK[status] > _RANK[worst] else worst
    lines = [f"{'dtype':10s} {'entries':>7s} {TRACED:>12s} {HOST:>14s} {FAIL:>6s}"]
    for dt, c in sorted(per_dtype.items()):
        lines.append(f"{dt:10s} {sum(c.values()):7d} {c[TRACED]:12d} {c[HOST]:14d} {c[FAIL]:6d}")
    n = len(per_entry)
    if n:
        traced = sum(s == TRACED for s in per_entry.values())
        passed = sum(s != FAIL for s in per_entry.values())
        lines.append(f"entries ({'+'.join(headline_dtypes)}): {n}, pass {passed} ({100 * passed / n:.1f}%), "
                     f"pass traced {traced} ({100 * traced / n:.1f}%), fail {n - passed}")
    if expected:
        lines.append(f"expected failures (xfail: opinfo_skips.EXPECTED_FAILS), not counted above: {expected}")
    return "\n".join(lines)
