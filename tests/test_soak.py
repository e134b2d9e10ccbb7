"""Long runs stay flat (lazyxla/bench/soak.py): after warm-up, a training run's device-memory
ledger (bytes and live buffers), JAX's live arrays and the executables compiled never move.
The count argument: a leak of one buffer, array or executable per step would show as
(steps - warm-up) more at the end; equality over a couple of hundred steps rules it out for any
number of steps. `python -m lazyxla.bench.soak --steps 2000` runs the GPT for 2,000 steps
and reports the RSS slope (docs/reliability.md, "Long runs")."""
from __future__ import annotations

import pytest

from lazyxla.bench import soak


def _check(report: soak.Report, steps: int) -> None:
    assert report.steps == steps and report.samples[-1]["step"] == steps
    assert report.moved == {}, report.text()
    last = report.samples[-1]
    assert last["live_buffers"] > 0 and last["jax_live_arrays"] >= last["live_buffers"]
    assert last["executables"] >= 1


def test_mlp_counts_flat_over_200_steps():
    report = soak.run(steps=200, workload="mlp", every=20, warmup=20)
    _check(report, 200)
    assert report.samples[-1]["loss"] < report.samples[0]["loss"]


@pytest.mark.slow
def test_gpt_counts_flat_after_warmup():
    report = soak.run(steps=80, workload="gpt", every=10, warmup=20)
    _check(report, 80)
    assert report.samples[-1]["executables"] == report.samples[0]["executables"] <= 3


def test_slope_is_least_squares():
    assert soak.slope([0, 1, 2, 3], [1, 3, 5, 7]) == 2.0
    assert soak.slope([5], [1]) == 0.0
