"""`torch_xla.debug.profiler` (xp): trace annotations and profiling sessions on JAX's
profiler, which records lazyxla's compiled graphs and the host's annotations alike.

`Trace(name)` (and `trace_me(name)`, `StepTrace(name, step_num=...)`) is a
`jax.profiler.TraceAnnotation` and, as upstream, an IR scope `name.<n>`: a step
barrier (`torch_xla.sync`, `xm.mark_step`) inside it raises RuntimeError
"Expecting scope to be empty but it is <scope>", because a graph must not be cut
inside a scope (upstream's ResetScopeContext); `StepTrace` closes its scope and then
runs the barrier itself. `start_trace(log_dir)` / `stop_trace()` are JAX's session;
`start_server(port)` JAX's profiler server. The on-demand client `trace(...)` (TSL's
remote capture) is not mapped.
"""
from __future__ import annotations

import functools
import itertools
import os
import threading
from typing import Any, Callable, List, Optional, Union

import jax

from ...unsupported import unsupported_names

_scopes = threading.local()
_scope_ids = itertools.count(1)
_tracer_marked_step = [False]


def _stack() -> List[str]:
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def check_no_open_scope() -> None:
    """Raise upstream's error when a step barrier is reached inside a `Trace`."""
    stack = _stack()
    if stack:
        raise RuntimeError(f"Expecting scope to be empty but it is {stack[-1]}")


def set_tracer_marked_step(value: bool) -> None:
    _tracer_marked_step[0] = bool(value)


def get_tracer_marked_step() -> bool:
    return _tracer_marked_step[0]


class Trace:
    """A named trace event (`jax.profiler.TraceAnnotation`) and IR scope for the body;
    keyword arguments become the event's metadata."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self._kwargs = kwargs
        self._annotation: Optional[jax.profiler.TraceAnnotation] = None
        self.scope: Optional[str] = None

    def __enter__(self) -> "Trace":
        self.scope = f"{self.name}.{next(_scope_ids)}"
        _stack().append(self.scope)
        self._annotation = jax.profiler.TraceAnnotation(self.name, **self._kwargs)
        self._annotation.__enter__()
        return self

    def _close_scope(self) -> None:
        stack = _stack()
        if self.scope is not None and self.scope in stack:
            stack.remove(self.scope)
        self.scope = None

    def __exit__(self, *exc: Any) -> None:
        self._close_scope()
        if self._annotation is not None:
            self._annotation.__exit__(*exc)
            self._annotation = None


class StepTrace(Trace):
    """A `Trace` for one training step: closes its scope, then runs the step barrier
    (`torch_xla.sync()`), as upstream."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)

    def __enter__(self) -> "StepTrace":
        set_tracer_marked_step(True)
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close_scope()
        from ... import torch_xla
        torch_xla.sync()
        super().__exit__(*exc)


def trace_me(scope: str) -> Callable[[Callable], Callable]:
    """Decorator: the function's calls run inside `Trace(scope)`."""
    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Trace(scope):
                return func(*args, **kwargs)
        return wrapper
    return decorator


def start_server(port: int, only_on_master: bool = True) -> Any:
    """JAX's profiler server on `port` (on the master ordinal only, unless
    `only_on_master=False`); None on the other ordinals."""
    from ..runtime import global_ordinal
    if not only_on_master or global_ordinal() == 0:
        return jax.profiler.start_server(port)
    return None


def start_trace(log_dir: Union[os.PathLike, str]) -> None:
    """Starts JAX's profiler session, saved to `log_dir` by `stop_trace()`; a second
    start raises RuntimeError, as upstream."""
    jax.profiler.start_trace(str(log_dir))


def stop_trace() -> None:
    """Stops the session and writes it (TensorBoard's profile plugin reads it)."""
    jax.profiler.stop_trace()


__getattr__ = unsupported_names(__name__)
