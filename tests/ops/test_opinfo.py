"""PyTorch's OpInfo database (`op_db`) on lazyxla, compared with eager CPU (issue #15).

Every entry runs in float32, int64, complex64 and bfloat16, wherever eager CPU supports
the dtype. The default run takes the first DEFAULT_SAMPLES samples of each entry in
float32 and int64; the `slow` run takes every sample of every dtype. Each (entry, dtype)
passes traced, passes through the host fallback (allowed only for the ops in
opinfo_skips.HOST_OPS), or fails; the tally is printed at the end of the run (see
conftest.py here) and recorded in docs/opinfo.md. The only list of exceptions is
opinfo_skips.py.
"""
from __future__ import annotations

import functools

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import lazyxla as lx
from opinfo_harness import FAIL, HOST, NO_SAMPLES, RESULTS, entry_name, run_entry
from opinfo_skips import COMPLEX_PENDING_REASON, HOST_OPS, SKIPS

DEFAULT_SAMPLES = 2
DEFAULT_DTYPES = (torch.float32, torch.int64)
ALL_DTYPES = DEFAULT_DTYPES + (torch.complex64, torch.bfloat16)


def _params(dtypes) -> list:
    out = []
    for op in op_db:
        name = entry_name(op)
        supported = op.supported_dtypes("cpu")
        for dtype in dtypes:
            if dtype not in supported:
                continue
            marks = [pytest.mark.skip(reason=SKIPS[name])] if name in SKIPS else []
            out.append(pytest.param(op, dtype, id=f"{name}-{str(dtype)[6:]}", marks=marks))
    return out


@functools.cache
def complex_supported() -> bool:
    """Whether lazyxla takes complex tensors at all (the `complex` branch adds them)."""
    try:
        torch.zeros(2, dtype=torch.complex64).to(lx.device()).cpu()
        return True
    except Exception:  # noqa: BLE001  (lazyxla refuses the dtype: a TypeError today)
        return False


def _check(op, dtype, limit) -> None:
    out = run_entry(op, dtype, limit)
    RESULTS[f"{entry_name(op)}|{str(dtype)[6:]}"] = dict(status=out.status, host=out.host_ops)
    if out.status == NO_SAMPLES:
        pytest.skip("no sample that eager CPU runs")
    if out.status == FAIL:
        if dtype.is_complex and not complex_supported():
            pytest.xfail(COMPLEX_PENDING_REASON)
        pytest.fail(out.error, pytrace=False)
    if out.status == HOST:
        unexpected = [o for o in out.host_ops if o not in HOST_OPS]
        assert not unexpected, f"ran on the host, not listed in opinfo_skips.HOST_OPS: {unexpected}"


@pytest.mark.parametrize("op,dtype", _params(DEFAULT_DTYPES))
def test_opinfo(op, dtype):
    _check(op, dtype, DEFAULT_SAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("op,dtype", _params(ALL_DTYPES))
def test_opinfo_all_samples(op, dtype):
    _check(op, dtype, None)
