"""Unchanged Hugging Face scripts on lazyxla (issue #31): a Trainer script and an accelerate
loop (tests/hf_scripts/, which never name lazyxla) give the CPU run's losses under
`python -m lazyxla.run`, with a flat step: no compiles after warm-up and a fixed, small
number of graphs per optimizer step."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from helpers import child_env

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

SCRIPTS = pathlib.Path(__file__).parent / "hf_scripts"
WARMUP = 2   # optimizer steps that may compile (the first step, then the first logged one)


def _run(args: list, tmp_path, env: dict | None = None) -> dict:
    full_env = child_env(**(env or {}))
    full_env.pop("LAZYXLA_HOST_READ_MAX_ELEMENTS", None)   # lazyxla's defaults, as users run it
    full_env.pop("LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS", None)
    out = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                         timeout=900, cwd=tmp_path, env=full_env)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.stdout.splitlines()
             if line.split(" ", 1)[0] in ("LOSSES", "STEPS", "FIRST", "REST", "DEVICE")}
    return {"losses": json.loads(lines["LOSSES"]), "device": lines["DEVICE"],
            "steps": json.loads(lines.get("STEPS", "[]")), "first": json.loads(lines.get("FIRST", "{}")),
            "rest": json.loads(lines.get("REST", "{}"))}


def _cpu(script: str, *args, tmp_path) -> list:
    run = _run([SCRIPTS / script, *args, "--cpu"], tmp_path)
    assert run["device"] == "cpu"
    return run["losses"]


def _lazy(launcher: str, script: str, *args, tmp_path, env: dict | None = None) -> dict:
    run = _run([SCRIPTS / "measure.py", launcher, SCRIPTS / script, *args], tmp_path, env)
    assert run["device"] in ("lazyxla:0", "xla:0")
    return run


def _check_flat(steps: list, graphs: int) -> None:
    steady = steps[WARMUP - 1:]
    assert steady, steps
    assert all(s["UncachedCompile"] == 0 for s in steady), steps
    assert {s["ExecuteComputation"] for s in steady} == {graphs}, steps
    assert len({s["TracedOps"] for s in steady}) == 1, steps   # nothing grows with the step


@pytest.mark.slow   # the default suite's Trainer run is test_trainer_compiles_each_kind_of_step_once
def test_trainer_runs_natively_with_the_cpu_losses(tmp_path):
    # Per step: the forward and backward (computed once, when Trainer's nan/inf filter
    # reads the loss: the gradients come with it) and the optimizer step's graph; the
    # filter's isinf, the logged values and transformers' mask check are replayed on the host.
    lazy = _lazy("run", "trainer_gpt2.py", 6, 1, tmp_path=tmp_path)
    assert lazy["losses"] == pytest.approx(_cpu("trainer_gpt2.py", 6, 1, tmp_path=tmp_path), rel=2e-4)
    _check_flat(lazy["steps"], graphs=2)
    replayed = {s["HostEvaluatedRead"] for s in lazy["steps"][WARMUP - 1:]}
    assert len(replayed) == 1 and replayed.pop() >= 3


def _total(run: dict, counter: str) -> int:
    return run["first"][counter] + sum(s[counter] for s in run["steps"]) + run["rest"][counter]


def test_trainer_compiles_each_kind_of_step_once(tmp_path):
    # Issue 49: 12 steps of a BERT classifier's fine-tune, logging every 5. Step 1 compiles
    # the nan/inf filter's read (the forward, computed when it reads the loss) and the step's
    # graph; fused AdamW's fresh step counts and the loss sum the Trainer resets after each
    # log (`tr_loss -= tr_loss`) enter as device data (sync/entries.py), and the logged mean
    # replays on the host: nothing compiles after step 1.
    lazy = _lazy("run", "trainer_bert.py", 12, tmp_path=tmp_path)
    assert lazy["losses"] == pytest.approx(_cpu("trainer_bert.py", 12, tmp_path=tmp_path), rel=2e-4)
    assert len(lazy["losses"]) == 2 and len(lazy["steps"]) == 11
    assert lazy["first"]["UncachedCompile"] == 2 and _total(lazy, "UncachedCompile") == 2
    assert {s["ExecuteComputation"] for s in lazy["steps"]} == {2}
    # the logging (between steps 5 and 6, 10 and 11) traces a few ops of its own
    assert len({s["TracedOps"] for i, s in enumerate(lazy["steps"], 2) if i % 5 != 1}) == 1


@pytest.mark.slow
def test_trainer_with_evaluation_compiles_each_kind_once(tmp_path):
    # A fine-tune as usually written (trainer_bert.py --eval): two micro-batches a step, warmup
    # and cosine schedule, an evaluation every 6 steps with a metric. Each kind compiles once:
    # step 1 the two micro-batches' reads (the nan/inf filter's) and the optimizer step; the
    # evaluation once (its batches' logits and losses stay on the device until the end: one
    # graph for all three); nothing else. The first step after a log is the steady kind: its
    # running loss, reset, enters as device data although two reads cross its sum
    # (frontend/storage.py `Storage.entry`).
    lazy = _lazy("run", "trainer_bert.py", 12, "--eval", tmp_path=tmp_path)
    cpu = _cpu("trainer_bert.py", 12, "--eval", tmp_path=tmp_path)
    assert len(lazy["losses"]) == 6 and lazy["losses"] == pytest.approx(cpu, rel=2e-4)  # loss, eval loss, accuracy
    steps = lazy["steps"]   # steps 2..12
    assert lazy["first"]["UncachedCompile"] == 3 and _total(lazy, "UncachedCompile") == 4
    assert [s["UncachedCompile"] for s in steps] == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert lazy["rest"]["UncachedCompile"] == 0 and lazy["rest"]["ExecuteComputation"] == 1
    assert [s["ExecuteComputation"] for s in steps] == [3] * 5 + [4] + [3] * 5
    # the steps that neither follow a log nor hold an evaluation trace the same ops
    assert len({s["TracedOps"] for i, s in enumerate(steps, 2) if i not in (6, 7, 11)}) == 1


@pytest.mark.slow
def test_trainer_second_run_compiles_nothing_new(tmp_path):
    # The persistent compile cache (compile/disk_cache.py): every graph the second process
    # misses in memory loads from disk, from lazyxla's executable store (compile/exe_store.py:
    # nothing traced or lowered), and no entry is added.
    cache = tmp_path / "cache"
    runs, entries = [], []
    for _ in range(2):
        runs.append(_lazy("run", "trainer_bert.py", 6, tmp_path=tmp_path, env={"LAZYXLA_CACHE_DIR": str(cache)}))
        entries.append((len(list(cache.rglob("*-cache"))), len(list(cache.rglob("*-lazyxla-exe")))))
    first, second = runs
    assert _total(first, "UncachedCompile") == 2 and _total(first, "PersistentCacheHit") == 0
    assert _total(second, "UncachedCompile") == _total(second, "ExecutableStoreHit") == 2
    assert _total(second, "PersistentCacheHit") == 0
    assert entries[0] == entries[1] and min(entries[0]) >= 2
    assert second["losses"] == first["losses"]


def test_accelerate_loop_runs_natively_with_the_cpu_losses(tmp_path):
    lazy = _lazy("run", "accelerate_gpt2.py", 6, 1, tmp_path=tmp_path)
    assert lazy["losses"] == pytest.approx(_cpu("accelerate_gpt2.py", 6, 1, tmp_path=tmp_path), rel=2e-4)
    _check_flat(lazy["steps"], graphs=1)   # loss.item() after the step reads its result


@pytest.mark.slow
@pytest.mark.parametrize("script", ["trainer_gpt2.py", "accelerate_gpt2.py"])
def test_gradient_accumulation_natively(script, tmp_path):
    lazy = _lazy("run", script, 5, 2, tmp_path=tmp_path)
    assert lazy["losses"] == pytest.approx(_cpu(script, 5, 2, tmp_path=tmp_path), rel=2e-4)
    # A read of each micro-batch's loss computes that micro-batch (Trainer's filter, the
    # loop's loss.item()); the Trainer adds the optimizer step's graph.
    _check_flat(lazy["steps"], graphs=3 if script == "trainer_gpt2.py" else 2)


@pytest.mark.slow
def test_cpu_only_trainer_after_import_lazyxla_is_unchanged(tmp_path):
    driver = ("import runpy, sys; import lazyxla; sys.argv = sys.argv[1:]; "
              "runpy.run_path(sys.argv[0], run_name='__main__')")
    run = _run(["-c", driver, SCRIPTS / "trainer_gpt2.py", 4, 1, "--cpu"], tmp_path)
    assert run["device"] == "cpu"
    assert run["losses"] == _cpu("trainer_gpt2.py", 4, 1, tmp_path=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script, accumulation, flags, graphs", [
    ("trainer_gpt2.py", 1, (), 2), ("trainer_gpt2.py", 1, ("--bf16",), 2), ("trainer_gpt2.py", 2, (), 2),
    ("accelerate_gpt2.py", 1, (), 1), ("accelerate_gpt2.py", 2, (), 2)])
def test_through_compat_the_xla_path_gives_the_cpu_losses(script, accumulation, flags, graphs, tmp_path):
    # transformers and accelerate see torch_xla: Trainer skips its nan/inf filter read and
    # runs xm.mark_step before logging. bf16=True passes transformers' device check there
    # and, as on PyTorch/XLA off TPU, trains in float32 (accelerate's bf16 on XLA is the
    # TPU-only XLA_USE_BF16 switch).
    lazy = _lazy("compat", script, 5, accumulation, *flags, tmp_path=tmp_path)
    assert lazy["losses"] == pytest.approx(_cpu(script, 5, accumulation, tmp_path=tmp_path), rel=2e-4)
    _check_flat(lazy["steps"], graphs=graphs)
