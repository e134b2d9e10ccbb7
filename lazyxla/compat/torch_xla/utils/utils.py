"""`torch_xla.utils.utils` (xu): the small helpers scripts and upstream's tests use
(SampleGenerator: upstream's examples' fake data). Plain Python with no lazyxla
counterpart."""
from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Iterator, Optional

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


class SampleGenerator:
    """An iterable giving the same `data` `sample_count` times: synthetic batches in
    place of a DataLoader. Each `iter()` starts over; `len()` is `sample_count`."""

    def __init__(self, data: Any, sample_count: int) -> None:
        self._data = data
        self._sample_count = sample_count

    def __iter__(self) -> Iterator[Any]:
        return itertools.repeat(self._data, self._sample_count)

    def __len__(self) -> int:
        return self._sample_count


__getattr__ = unsupported_names(__name__)
