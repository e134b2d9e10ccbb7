"""Prints the OpInfo tally (tests/ops/test_opinfo.py) at the end of a run that ran it."""
from opinfo_harness import RESULTS, summarize


def pytest_terminal_summary(terminalreporter) -> None:
    if RESULTS:
        terminalreporter.section("OpInfo database on lazyxla (tests/ops/test_opinfo.py)")
        terminalreporter.write_line(summarize(RESULTS))
