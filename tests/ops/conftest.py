"""Prints the OpInfo tally (tests/ops/test_opinfo.py) at the end of a run that ran it. Under
pytest-xdist a worker hands its results to the controller instead (tests/conftest.py)."""
from opinfo_harness import RESULTS, summarize


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workeroutput") and RESULTS:   # an xdist worker
        session.config.workeroutput["opinfo_results"] = dict(RESULTS)


def pytest_terminal_summary(terminalreporter) -> None:
    if RESULTS:
        terminalreporter.section("OpInfo database on lazyxla (tests/ops/test_opinfo.py)")
        terminalreporter.write_line(summarize(RESULTS))
