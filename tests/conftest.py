import os
import sys

import pytest

import lazyxla as lx

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def dev():
    return lx.device()


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts with clean metrics and default donation switches."""
    lx.sync(wait=True)
    lx.metrics.clear_all()
    yield
    lx.set_aliasing(True)
    lx.set_explicit_donation(False)
