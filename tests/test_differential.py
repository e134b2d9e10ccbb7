"""Differential testing: random programs on lazyxla vs eager CPU PyTorch.

The generator and the donation model live in tests/differential/program.py.
Default run: a few hundred programs (LAZYXLA_DIFF_EXAMPLES overrides, e.g.
LAZYXLA_DIFF_EXAMPLES=5000 for the long mode run by hand);
LAZYXLA_DIFF_STEPS sets the maximum program length.
"""
from __future__ import annotations

import os
import warnings

from hypothesis import HealthCheck, given, settings, strategies as st

from differential.program import run_program

EXAMPLES = int(os.environ.get("LAZYXLA_DIFF_EXAMPLES", "400"))
STEPS = int(os.environ.get("LAZYXLA_DIFF_STEPS", "20"))


@settings(max_examples=EXAMPLES, deadline=None, database=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_programs_match_eager(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # host-fallback notices
        run_program(data, STEPS)
