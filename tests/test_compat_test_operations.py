"""PyTorch/XLA's own op test file, test/test_operations.py of v2.9.0 (tests/compat_upstream/,
copied unmodified with its helper test_utils.py), run through `python -m lazyxla.compat`.

PyTorch/XLA 2.9 itself passes 196 of its 202 tests on CPU (6 skipped). lazyxla must pass
at least 190 of them, and every test it fails must be one of `EXPECTED_FAILURES`, each
with its reason (docs/compat.md, "Upstream tests"). The run takes about a minute.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from helpers import child_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UPSTREAM = os.path.join(REPO, "tests", "compat_upstream")
UPSTREAM_PASSES = 196   # PyTorch/XLA 2.9 on CPU
FLOOR = 190

# Tests upstream passes that lazyxla fails, with the reason (docs/compat.md lists them).
EXPECTED_FAILURES = {
    "TestAtenXlaTensor.test_cached_addcdiv":
        "counts TransferToDeviceTime samples of upstream's device-data cache of scalars; lazyxla "
        "keeps no such cache (a lifted scalar travels with each run, docs/compat.md DeviceDataCacheMiss)",
    "TestAtenXlaTensor.test_patched_linear_3D":
        "checks that the HLO has no reshape: torch.einsum decomposes to bmm and reshapes in ATen before "
        "lazyxla sees it (upstream's einsum is a custom XLA op); values and gradients pass",
    "TestAtenXlaTensor.test_replace_xla_tensor":
        "counts DestroyXlaTensor for upstream's internal tensor objects and calls _replace_xla_tensor, "
        "which swaps a tensor's IR in place; neither exists in lazyxla",
    "TestLoweringContext.test_api":
        "torch_xla._XLAC.lowering.LoweringContext: upstream's HLO proto and parameter maps; lazyxla "
        "exposes HLO text only (lx.debug.hlo_text)",
    "TestLoweringContext.test_get_parameters_scalar": "the same LoweringContext",
}


def _results(out: str) -> tuple:
    """(ran, skipped, failed test names as Class.test) from unittest's verbose output."""
    ran = int(re.search(r"^Ran (\d+) tests? in ", out, re.M).group(1))
    skipped = re.search(r"^(?:OK|FAILED) \(.*?skipped=(\d+)", out, re.M)
    failed = set()
    for m in re.finditer(r"^(?:FAIL|ERROR): (\S+) \(__main__\.(\w+)\.(\w+)\)", out, re.M):
        failed.add(f"{m.group(2)}.{m.group(3)}")
    return ran, int(skipped.group(1)) if skipped else 0, failed


@pytest.mark.slow
def test_upstream_test_operations_passes_190_of_196(tmp_path):
    pytest.importorskip("absl", reason="upstream's test file imports absl (pip install absl-py)")
    out = subprocess.run([sys.executable, "-m", "lazyxla.compat", os.path.join(UPSTREAM, "test_operations.py"),
                          "--verbosity", "2"], capture_output=True, text=True, timeout=1800, cwd=UPSTREAM,
                         env=child_env())
    text = out.stdout + out.stderr
    assert re.search(r"^Ran \d+ tests? in ", text, re.M), text[-5000:]
    ran, skipped, failed = _results(text)
    passed = ran - skipped - len(failed)
    unexpected = sorted(failed - set(EXPECTED_FAILURES))
    assert not unexpected, f"failures not in EXPECTED_FAILURES: {unexpected}\n{text[-8000:]}"
    assert ran - skipped == UPSTREAM_PASSES, (ran, skipped)
    assert passed >= FLOOR, f"{passed} of {UPSTREAM_PASSES} passed: failed {sorted(failed)}"
