"""`torch_xla.utils.utils` (xu): the small helpers scripts and upstream's tests use.
Plain Python with no lazyxla counterpart."""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from ...unsupported import unsupported_names


def as_list(t: Any):
    """`t` itself if it is a list or tuple, else `[t]`."""
    return t if isinstance(t, (tuple, list)) else [t]


def getenv_as(name: str, type: Callable[[str], Any], defval: Optional[Any] = None) -> Any:
    """`os.environ[name]` converted by `type` (a bool from an integer string, as
    upstream), `defval` when unset."""
    env = os.environ.get(name)
    if env is None:
        return defval
    return bool(int(env)) if type is bool else type(env)


__getattr__ = unsupported_names(__name__)
