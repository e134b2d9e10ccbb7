"""pytest plugin for scripts/tpu/run_suite.sh: a chunk that a test kills (XLA:TPU's compiler
aborts the process on some graphs, and no Python code can catch that) goes on in a new
process from the test after the one that died.

    python -m pytest -p suite_resume --resume-record FILE [--test-limit SECONDS] ...   (scripts/tpu on sys.path)

Each process's start, and each test's start and end (with its outcome), are appended to
FILE as they happen, flushed to disk; tests with a start in FILE are deselected, so a rerun
skips what already ran and the test the process died in. A dead process writes no junit
xml: `suite_chunks.py aborted` turns its part of FILE into one, the test without an end
failed. A test still running after `--test-limit` seconds (an XLA:TPU compile that never
returns holds its thread where no Ctrl-C reaches it) is marked HUNG in FILE, its threads'
stacks written after the mark, and the process kills itself, so that the chunk goes on from the next
test as after an abort."""
from __future__ import annotations

import faulthandler
import os
import signal
import threading

import pytest


def pytest_addoption(parser) -> None:
    parser.addoption("--resume-record", default=None,
                     help="file of the tests started and finished so far (run_suite.sh)")
    parser.addoption("--test-limit", type=float, default=0.0,
                     help="seconds a test may run before its process kills itself (0: no limit)")


class _Record:
    def __init__(self, path: str, limit: float) -> None:
        self.path = path
        self.limit = limit
        self.watchdog: threading.Timer | None = None
        self.ran = set()
        self.outcomes: dict = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as record:
                # a node id may hold spaces (a parameter's id): all after the mark
                self.ran = {entry[len("START "):].rstrip("\n") for entry in record if entry.startswith("START ")}
        self._write("PROCESS", str(os.getpid()))

    def _write(self, mark: str, nodeid: str) -> None:
        with open(self.path, "a", encoding="utf-8") as record:
            record.write(f"{mark} {nodeid}\n")
            record.flush()
            os.fsync(record.fileno())   # the process may die in the test

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items) -> None:
        done = [item for item in items if item.nodeid in self.ran]
        if done:
            config.hook.pytest_deselected(items=done)
            items[:] = [item for item in items if item.nodeid not in self.ran]

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self._write("START", nodeid)
        if self.limit > 0:
            # a thread of its own: the hung compile releases the interpreter lock, but the
            # main thread never returns to Python to see a signal
            self.watchdog = threading.Timer(self.limit, self._hung, args=(nodeid,))
            self.watchdog.daemon = True
            self.watchdog.start()

    def _hung(self, nodeid: str) -> None:
        self._write("HUNG", nodeid)
        with open(self.path, "a", encoding="utf-8") as record:   # pytest captures stderr
            faulthandler.dump_traceback(file=record, all_threads=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def pytest_runtest_logreport(self, report) -> None:
        # a test's outcome over its phases: failed if one failed, skipped if its set-up skipped
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped:
            self.outcomes.setdefault(report.nodeid, "skipped")

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        self._write("END", f"{nodeid} {self.outcomes.pop(nodeid, 'passed')}")


def pytest_configure(config) -> None:
    path = config.getoption("--resume-record")
    if path:
        config.pluginmanager.register(_Record(path, config.getoption("--test-limit")), "suite_resume_record")
