"""scripts/tpu/suite_chunks.py: the default suite's files in chunks that fit one device
call, the durations they are planned from, and the counts of the chunks' junit files."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

PATH = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "tpu" / "suite_chunks.py"


@pytest.fixture
def chunks(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("suite_chunks", PATH)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "suite_chunks", module)   # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "TPU_FACTOR", 2.0)
    monkeypatch.setattr(module, "BUDGET_S", 100.0)
    monkeypatch.setattr(module, "PROCESS_S", 10.0)
    monkeypatch.setattr(module, "DURATIONS", tmp_path / "durations.json")
    return module


def test_files_are_what_pytest_collects(chunks):
    files = chunks.test_files()
    assert "tests/test_tpu_suite_chunks.py" in files and "tests/ops/test_opinfo.py" in files
    assert not any(f.startswith("tests/compat_upstream/") for f in files)   # its conftest's collect_ignore


def test_chunks_fit_the_budget_and_split_a_big_file_by_function(chunks):
    durations = {"a.py": {"total": 20.0, "tests": {"a.py::t": 20.0}},
                 "big.py": {"total": 60.0, "tests": {"big.py::x": 30.0, "big.py::y": 20.0, "big.py::z": 10.0}},
                 "c.py": {"total": 5.0, "tests": {}}}
    items = chunks.items(["a.py", "big.py", "c.py", "new.py"], durations)
    assert [(i.args, i.cpu_s) for i in items] == [
        (("a.py",), 20.0), (("big.py::x",), 30.0), (("big.py::y", "big.py::z"), 30.0), (("c.py",), 5.0),
        (("new.py",), chunks.UNKNOWN_FILE_S)]
    packed = chunks._pack(items)
    assert [p.args for p in packed] == [("a.py",), ("big.py::x",), ("big.py::y", "big.py::z", "c.py"), ("new.py",)]
    assert all(chunks.PROCESS_S + p.tpu_s <= chunks.BUDGET_S for p in packed[:3])


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="12.5">
<testcase classname="tests.test_a" name="test_one[x]" file="tests/test_a.py" time="1.5"/>
<testcase classname="tests.test_a" name="test_one[y]" file="tests/test_a.py" time="2.5"/>
<testcase classname="tests.test_a.TestK" name="test_two" file="tests/test_a.py" time="3"><failure message="no"/></testcase>
<testcase classname="tests.ops.test_b" name="test_three" file="tests/ops/test_b.py" time="4">
<skipped message="this machine has no TCP sockets"/></testcase>
<testcase classname="tests.ops.test_b" name="test_four" file="tests/ops/test_b.py" time="0"><error message="e"/></testcase>
</testsuite></testsuites>"""


def test_record_durations_and_count_results(chunks, tmp_path):
    junit = tmp_path / "chunk-1.xml"
    junit.write_text(JUNIT)
    chunks.record(junit)
    durations = chunks.load_durations()
    assert durations["tests/test_a.py"] == {"total": 7.0, "tests": {"tests/test_a.py::test_one": 4.0,
                                                                    "tests/test_a.py::TestK::test_two": 3.0}}
    assert durations["tests/ops/test_b.py"]["total"] == 4.0
    junit.write_text(JUNIT.replace('time="4"', 'time="5"').replace("tests/test_a.py", "tests/test_c.py"))
    chunks.record(junit, scale=2.0)   # another run's files replace theirs, the rest stays
    durations = chunks.load_durations()
    assert durations["tests/ops/test_b.py"]["total"] == 10.0 and durations["tests/test_a.py"]["total"] == 7.0
    assert durations["tests/test_c.py"]["total"] == 14.0
    total, bad, reasons, seconds = chunks.counts([junit])
    assert dict(total) == {"passed": 2, "failed": 1, "skipped": 1, "errors": 1} and seconds == 12.5
    assert bad == ["FAILED tests.test_a.TestK::test_two", "ERROR tests.ops.test_b::test_four"]
    assert reasons == {"this machine has no TCP sockets": 1}
    assert chunks.line(total, seconds) == "2 passed, 1 failed, 1 skipped, 1 errors in 12 s, 40.00% passed"


DIES = """import os, pytest
def test_a(): pass
@pytest.mark.parametrize("x", ["a b"])   # a node id with a space
def test_a2(x): pass
def test_b(): os.abort()   # as XLA:TPU's compiler does on some graphs
class TestK:
    def test_c(self): assert False
    def test_d(self): pytest.skip("no chip")
"""


def chunk_runner(tmp_path, name: str, source: str, *options: str):
    """(run(part) -> pytest's exit status, the record): one chunk of the test file `name`
    made of `source`, run under suite_resume.py as run_suite.sh runs it."""
    import os
    import subprocess
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / name).write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    record = tmp_path / "chunk-1.record"
    env = dict(os.environ, PYTHONPATH=str(PATH.parent))

    def run(part: int) -> int:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_resume",
                               "--resume-record", str(record), *options,
                               f"--junitxml={tmp_path}/chunk-1.part{part}.xml", f"tests/{name}"],
                              cwd=tmp_path, env=env, capture_output=True, timeout=120).returncode
    return run, record


def test_a_chunk_goes_on_after_a_test_kills_its_process(chunks, tmp_path):
    import signal
    run, record = chunk_runner(tmp_path, "test_dies.py", DIES)
    assert run(1) == -signal.SIGABRT                            # the first process dies in test_b
    assert not (tmp_path / "chunk-1.part1.xml").exists()
    assert chunks.aborted(record, tmp_path / "chunk-1.aborted1.xml", "signal 6")
    assert run(2) == 1                                          # test_c fails; test_a and test_b not run again
    assert not chunks.aborted(record, tmp_path / "chunk-1.aborted2.xml")   # the second process ended its tests
    total, bad, reasons, _ = chunks.counts(sorted(tmp_path.glob("chunk-1.*.xml")))
    assert dict(total) == {"passed": 2, "failed": 2, "skipped": 1}
    assert bad == ["FAILED tests.test_dies::test_b", "FAILED tests.test_dies.TestK::test_c"]
    assert list(reasons) == ["no chip"]


HANGS = """
import time
def test_a(): pass
def test_b(): time.sleep(60)   # as an XLA:TPU compile that never returns
def test_c(): pass
"""


def test_a_test_past_its_limit_is_killed_and_counted_failed(chunks, tmp_path):
    import signal
    run, record = chunk_runner(tmp_path, "test_hangs.py", HANGS, "--test-limit", "2")
    assert run(1) == -signal.SIGKILL                              # killed in test_b, long before its 60 s
    text = record.read_text()
    assert "HUNG tests/test_hangs.py::test_b" in text and "test_b" in text.split("HUNG", 1)[1]   # its stacks
    assert chunks.aborted(record, tmp_path / "chunk-1.aborted1.xml", "signal 9")
    assert "per-test limit" in (tmp_path / "chunk-1.aborted1.xml").read_text()
    assert run(2) == 0                                            # test_c passes in a new process
    total, bad, _, _ = chunks.counts(sorted(tmp_path.glob("chunk-1.*.xml")))
    assert dict(total) == {"passed": 2, "failed": 1}
    assert bad == ["FAILED tests.test_hangs::test_b"]
