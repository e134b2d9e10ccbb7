import atexit
import os
import random
import shutil
import sys
import tempfile
import zlib

import pytest
import torch

# The persistent compile cache is on by default: the suite uses a directory of its own,
# empty at the start and removed at the end, never the user's ~/.cache/lazyxla.
_CACHE_DIR = tempfile.mkdtemp(prefix="lazyxla-test-cache-")
os.environ["LAZYXLA_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)
# Small reads of pending work replay on the host by default (sync/host_eval.py), and a
# read's integer bookkeeping runs there too (sync/host_split.py). The suite checks the
# XLA lowerings and counts device graphs, so it reads through the device; the tests of
# the host paths themselves (and the Hugging Face runs) turn them on with `host_replay`.
os.environ["LAZYXLA_HOST_READ_MAX_ELEMENTS"] = "0"
os.environ["LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS"] = "0"

import lazyxla as lx  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))


def pytest_report_header(config) -> str:
    """The platform under the suite: CPU in CI, an accelerator in issue 45's runs."""
    import jax
    return f"lazyxla platform: {lx.platform()} ({jax.devices()[0].device_kind})"


_WORKERS_OPINFO: dict = {}   # the xdist controller's: what the workers ran of tests/ops/test_opinfo.py


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    _WORKERS_OPINFO.update(getattr(node, "workeroutput", {}).get("opinfo_results", {}))


def pytest_terminal_summary(terminalreporter) -> None:
    if _WORKERS_OPINFO:   # tests/ops/conftest.py prints it where one process ran the tests
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "ops"))
        from opinfo_harness import summarize
        terminalreporter.section("OpInfo database on lazyxla (tests/ops/test_opinfo.py)")
        terminalreporter.write_line(summarize(_WORKERS_OPINFO))


def pytest_addoption(parser):
    parser.addoption("--check-ir", action="store_true",
                     help="check every graph a sync collects against the IR's rules (LAZYXLA_CHECK_IR)")
    parser.addoption("--backend-policies", metavar="PLATFORM",
                     help="run on JAX's CPU devices under PLATFORM's backend policies (e.g. tpu: the "
                          "64-bit rule, packed scalars, split compiles), which finds their failures "
                          "without the chip; tests then take the platform's tolerances and skips")


def pytest_configure(config) -> None:
    policies = config.getoption("--backend-policies", None)
    if policies:
        from lazyxla.runtime import backend
        backend.select(policies)


@pytest.fixture
def dev():
    return lx.device()


@pytest.fixture(autouse=True)
def _fresh_state(request):
    """Each test starts with clean metrics, default donation switches and a random seed
    of its own (and, with --check-ir, runs with every collected graph checked:
    ir/check.py)."""
    lx.sync(wait=True)
    # the seed comes from the test's id, not from whatever ran before it in this worker:
    # a failure on random data reproduces however xdist shares the tests out
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    random.seed(seed)
    lx.metrics.clear_all()
    if request.config.getoption("--check-ir"):
        from lazyxla import config
        with config.override(check_ir=True):
            yield
    else:
        yield
    lx.set_aliasing(True)
    lx.set_explicit_donation(False)
    # the storage policy back to "from the settings" (LAZYXLA_STORAGE_DTYPES, else the
    # backend's default): a test that restores with set_storage_dtypes(previous) leaves an
    # explicit choice that would hide the TPU backend's default from later tests
    from lazyxla.state import FROM_SETTINGS, STATE
    STATE.set("storage_dtypes", FROM_SETTINGS)


@pytest.fixture
def checked_ir():
    """Every graph a sync collects in the test is checked against the IR's rules
    (ir/check.py; a malformed node raises `MalformedIR`)."""
    from lazyxla import config
    with config.override(check_ir=True):
        yield


@pytest.fixture
def host_replay():
    """Small host reads replayed, and read bookkeeping run, on the host, as lazyxla's
    default (users') has them."""
    from lazyxla import config
    defaults = config.Config()
    with config.override(host_read_max_elements=defaults.host_read_max_elements,
                         host_bookkeeping_max_elements=defaults.host_bookkeeping_max_elements):
        yield


@pytest.fixture
def torch_xla():
    """lazyxla's torch_xla compatibility layer installed for the test: the `torch_xla` module."""
    import lazyxla.compat as compat
    from lazyxla.state import STATE
    level = STATE.matmul_precision   # a test's own upstream level stays with that test
    compat.install()
    import torch_xla
    yield torch_xla
    compat.uninstall()
    STATE.set("matmul_precision", level)


@pytest.fixture
def fresh_compile_cache():
    """Counts of compiled graphs / donors are per test, as upstream's: an executable
    cached by an earlier test must not turn a compile into a cache hit, nor an earlier
    test's graph be the closest one a recompile explanation compares with."""
    from lazyxla.compile import explain
    from lazyxla.compile.cache import clear_cache
    clear_cache()
    explain.forget()
