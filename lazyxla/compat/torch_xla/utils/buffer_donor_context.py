"""`torch_xla.utils.buffer_donor_context`."""
from __future__ import annotations

import contextlib
from typing import Iterator

import lazyxla as lx

from ...unsupported import unsupported_names


@contextlib.contextmanager
def alias_with_buffer_donor_config(should_alias: bool = True) -> Iterator[bool]:
    """lx.explicit_donation(should_alias) for all devices: yields the previous value and
    restores it on exit, also on errors."""
    with lx.explicit_donation(should_alias) as previous:
        yield previous


__getattr__ = unsupported_names(__name__)
