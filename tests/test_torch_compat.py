"""torch's private surface (lazyxla/frontend/torch_compat.py): range check and pin agree,
and the modules it names for the compile stack are the ones that get patched."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

import lazyxla  # noqa: F401  (registers the device and patches the converter modules)
from lazyxla.frontend import torch_compat

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _torch_pin() -> tuple[tuple[int, int], tuple[int, int]]:
    """(lowest minor allowed, first minor excluded) of pyproject's `torch>=A.B,<C.D`."""
    m = re.search(r'"torch>=(\d+)\.(\d+),<(\d+)\.(\d+)"', PYPROJECT.read_text())
    assert m, "pyproject.toml pins torch as torch>=A.B,<C.D"
    a, b, c, d = map(int, m.groups())
    return (a, b), (c, d)


def test_pin_matches_the_verified_range():
    low, excluded = _torch_pin()
    first, last = torch_compat.VERIFIED
    assert low == first
    assert excluded == (last[0], last[1] + 1)


def test_running_torch_is_in_the_verified_range():
    first, last = torch_compat.VERIFIED
    assert first <= torch_compat.torch_version() <= last


@pytest.mark.parametrize("version,warns", [("2.10.0", True), ("2.11.0+cu130", False),
                                           ("2.15.0+cu132", False), ("2.16.0", True)])
def test_check_version_warns_outside_the_range(monkeypatch, version, warns):
    monkeypatch.setattr(torch, "__version__", version)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch_compat.check_version() is warns
    messages = [str(w.message) for w in caught]
    assert bool(messages) is warns
    if warns:
        assert "scripts/test_matrix.sh" in messages[0] and version in messages[0]


def test_autocast_header_is_the_installed_one():
    assert torch_compat.AUTOCAST_HEADER.is_file()
    assert str(torch_compat.AUTOCAST_HEADER).startswith(str(Path(torch.__file__).parent))


def test_jax_pin_matches_the_verified_range():
    from lazyxla import _jax
    m = re.search(r'"jax>=(\d+)\.(\d+),<(\d+)\.(\d+)"', PYPROJECT.read_text())
    assert m, "pyproject.toml pins jax as jax>=A.B,<C.D"
    a, b, c, d = map(int, m.groups())
    first, last = _jax.VERIFIED
    assert (a, b) == first and (c, d) == (last[0], last[1] + 1)
    assert 'jaxlib>=%d.%d,<%d.%d' % (a, b, c, d) in PYPROJECT.read_text()


@pytest.mark.parametrize("version,expected", [("2.15.0+cu132", (2, 15)), ("0.11.0", (0, 11)), ("2.11", (2, 11))])
def test_minor_of_a_version_string(version, expected):
    from lazyxla._versions import minor
    assert minor(version) == expected
