"""The `torch_xla` distribution that `importlib.metadata` finds while the layer is installed.

Hugging Face's availability checks ask the packaging metadata, not only the import
system: transformers' `is_torch_xla_available` reads `importlib.metadata.version("torch_xla")`
(falling back to the package's `__version__`, and to guessing distribution names from every
installed package's files when the lookup fails), and tools list `distributions()`. The
finder of install.py answers these lookups with this one distribution, so metadata and
imports agree for exactly as long as the finder is on `sys.meta_path`.

The version is PyTorch/XLA's release whose API the layer maps, with lazyxla's version as
the local part (`2.9.0+lazyxla.0.1.0`): PEP 440, so `packaging.version.parse` takes it,
and transformers' `version.parse(XLA_VERSION) >= version.parse("2.2.0")` (its FSDPv2
gate) holds.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
from typing import Optional

from .._versions import LAZYXLA_VERSION

UPSTREAM_RELEASE = "2.9.0"   # the PyTorch/XLA release whose API is mapped
VERSION = f"{UPSTREAM_RELEASE}+lazyxla.{LAZYXLA_VERSION}"
NAME = "torch_xla"

_FILES = {
    "METADATA": (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
                 "Summary: lazyxla's stand-in for PyTorch/XLA (python -m lazyxla.compat)\n"),
    "top_level.txt": f"{NAME}\n",
}


def matches(name: Optional[str]) -> bool:
    """Whether a metadata lookup of `name` (None: all distributions) means torch_xla,
    with the PEP 503 normalisation importlib applies (`torch-xla`, `Torch_XLA`)."""
    return name is None or re.sub(r"[-_.]+", "_", name).lower() == NAME


class TorchXlaDistribution(importlib.metadata.Distribution):
    """Metadata of the stand-in: name, version, top-level package; no file list."""

    def read_text(self, filename: str) -> Optional[str]:
        return _FILES.get(filename)

    def locate_file(self, path) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), str(path))
