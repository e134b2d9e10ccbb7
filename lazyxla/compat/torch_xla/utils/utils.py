"""`torch_xla.utils.utils` (xu): the small helpers scripts and upstream's tests use
(SampleGenerator and FnDataGenerator: fake data; TmpFolder; timing; walking nested
data with `for_each_instance` / `for_each_instance_rewrite` and `DataWrapper`). Plain
Python with no lazyxla counterpart."""
from __future__ import annotations

import copy
import itertools
import os
import shutil
import sys
import tempfile
import time
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

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


class FnDataGenerator:
    """`count` batches `(data, func(data))`, `data = gen_tensor(batch_size, *dims)`
    drawn anew for each batch; each `iter()` starts over."""

    def __init__(self, func: Callable, batch_size: int, gen_tensor: Callable, dims: Optional[List[int]] = None,
                 count: int = 1) -> None:
        self._func, self._batch_size, self._gen_tensor = func, batch_size, gen_tensor
        self._dims = list(dims) if dims else [1]
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self._count):
            data = self._gen_tensor(self._batch_size, *self._dims)
            yield data, self._func(data)


class TmpFolder:
    """A fresh temporary folder (`.name`), removed when the object is collected."""

    def __init__(self) -> None:
        self.name = tempfile.mkdtemp()
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.name, True)


class DataWrapper:
    """Base class of an object that holds tensors a device transfer should move:
    `get_tensors()` lists them, `from_tensors(moved)` builds the object anew from their
    moved copies (`xm.send_cpu_data_to_device`, `for_each_instance_rewrite`)."""

    def get_tensors(self) -> list:
        raise NotImplementedError(f"{type(self).__name__}.get_tensors is missing an implementation")

    def from_tensors(self, tensors: list) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.from_tensors is missing an implementation")


def _members(value: Any) -> Optional[list]:
    """The values `for_each_instance` walks into: dict keys and values, items of lists,
    tuples and sets, a DataWrapper's tensors, an object's attributes; None for a leaf."""
    if isinstance(value, dict):
        return [x for kv in value.items() for x in kv]
    if isinstance(value, (list, tuple, set)):
        return list(value)
    if isinstance(value, DataWrapper):
        return list(value.get_tensors())
    if hasattr(value, "__dict__"):
        return list(vars(value).values())
    return None


def for_each_instance(value: Any, select_fn: Callable[[Any], bool], fn: Callable[[Any], Any]) -> None:
    """`fn(x)` for each `x` in the nested `value` with `select_fn(x)`, each object once."""
    seen: Set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if select_fn(item):
            fn(item)
        else:
            stack.extend(reversed(_members(item) or ()))


def for_each_instance_rewrite(value: Any, select_fn: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """A copy of the nested `value` with each selected `x` replaced by `fn(x)`, as
    upstream's: tuples become lists, objects are shallow copies with rewritten
    attributes, a DataWrapper becomes `from_tensors` of its rewritten tensors, and an
    object met twice (cycles too) maps to one result."""
    done: Dict[int, Any] = {}

    def rewrite(item: Any) -> Any:
        if id(item) in done:
            return done[id(item)]
        if select_fn(item):
            result = done[id(item)] = fn(item)
        elif isinstance(item, dict):
            result = done[id(item)] = {}
            for k, v in item.items():
                key = rewrite(k)   # keys first, as for_each_instance visits them
                result[key] = rewrite(v)
        elif isinstance(item, set):
            result = done[id(item)] = set()
            result.update(rewrite(x) for x in item)
        elif isinstance(item, (list, tuple)):
            result = done[id(item)] = []
            result.extend(rewrite(x) for x in item)
        elif isinstance(item, DataWrapper):
            result = done[id(item)] = item.from_tensors([rewrite(x) for x in item.get_tensors()])
        elif hasattr(item, "__dict__"):
            result = done[id(item)] = copy.copy(item)
            for k, v in vars(result).items():
                setattr(result, k, rewrite(v))
        else:
            result = done[id(item)] = item
        return result
    return rewrite(value)


def eprint(*args: Any, **kwargs: Any) -> None:
    print(*args, file=sys.stderr, **kwargs)


def _print_fn(printfn: Optional[Callable]) -> Callable:
    """`printfn`, or for None: eprint when the `DEBUG` variable is set to non-zero, else nothing."""
    if printfn is not None:
        return printfn
    return eprint if int(os.environ.get("DEBUG", "0")) else (lambda *args, **kwargs: None)


def timed(fn: Callable[[], Any], msg: str = "", printfn: Optional[Callable] = eprint) -> Any:
    """`fn()`, printing `msg` and its wall time in milliseconds."""
    start = time.time()
    result = fn()
    _print_fn(printfn)(f"{msg}{1000.0 * (time.time() - start):.3f}ms")
    return result


class TimedScope:
    """Context manager printing `msg` and the body's wall time in milliseconds, unless
    `set_error` was called."""

    def __init__(self, msg: str = "", printfn: Optional[Callable] = eprint) -> None:
        self._msg, self._printfn, self._error = msg, _print_fn(printfn), None

    def __enter__(self) -> "TimedScope":
        self._start = time.time()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._error is None:
            self._printfn(f"{self._msg}{1000.0 * (time.time() - self._start):.3f}ms")

    def set_error(self, error: Any) -> None:
        self._error = error


__getattr__ = unsupported_names(__name__)
