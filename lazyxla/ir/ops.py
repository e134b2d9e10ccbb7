"""One record per op: every fact lazyxla keeps about an ATen op (or internal IR op), in one place.

Before these records the facts lived in about ten tables over seven modules, and
"how is aten.X handled?" took a search. Now each module that implements a fact
registers it here through `register_fact`, the only way in, which refuses a second
value for the same fact (two modules registering one op would make the winner
depend on import order). The old tables are read-only views (`facts(field)`), so
the hot paths keep a plain dictionary lookup.

The record sits in `ir/` because every layer reads it and none owns it: it holds
functions from lower/ and frontend/ without importing them. `lx.debug.explain_op`
reads it (through frontend/routes.py) to say which route an op takes.

Fields (all optional; an op without any fact has no record):
* lowering:       rule(ctx, *args, **kwargs) -> JAX value(s)            (lower/registry.py)
* decomposition:  lazyxla's own fn(*args, **kwargs) over lazy tensors,  (frontend/, lower/registry.py)
                  consulted before PyTorch's table
* view_inverse:   (fn(base, src, *vargs), cast): the direct scatter of a view op (lower/views.py);
                  a view op without one scatters through a constant index map
* special:        handler(func, info, args, kwargs) for ops that need more than a node
                  (copies, host reads, RNG, in-place views, math bits)  (frontend/handlers.py, ...)
* meta:           output-spec function for a lowered op torch ships no meta kernel for
* eager_check:    eager's argument check that the meta kernel lacks     (frontend/tracing.py)
* static_scalars: names of Scalar arguments that stay compile-time constants (frontend/opinfo.py)
* foreach_target: the single-tensor op a `_foreach_*` op applies per element, where the
                  name alone does not find it                          (frontend/foreach.py)
* autocast:       the autocast cast policy from PyTorch's shared lists  (frontend/autocast.py)
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Optional

FIELDS = ("lowering", "decomposition", "view_inverse", "special", "meta", "eager_check",
          "static_scalars", "foreach_target", "autocast")


class OpRecord:
    """Every fact about one op. Read it with `record(op)`; write it only with `register_fact`."""
    __slots__ = ("op",) + FIELDS

    def __init__(self, op: Any) -> None:
        self.op = op
        for field in FIELDS:
            setattr(self, field, None)

    def facts(self) -> dict:
        """{field: value} of the facts this op has."""
        return {f: getattr(self, f) for f in FIELDS if getattr(self, f) is not None}

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={_describe(v)}" for k, v in self.facts().items())
        return f"OpRecord({self.op}: {parts})"


_RECORDS: dict = {}
# field -> {op: value}: the per-fact views, kept in step by register_fact
_INDEX: dict = {field: {} for field in FIELDS}


def _describe(value: Any) -> str:
    fn = value[0] if isinstance(value, tuple) and value and callable(value[0]) else value
    if callable(fn) and hasattr(fn, "__module__") and hasattr(fn, "__qualname__"):
        return f"{fn.__module__}.{fn.__qualname__}"
    return repr(value)


def _check_field(field: str) -> None:
    if field not in _INDEX:
        raise ValueError(f"lazyxla: unknown op fact {field!r}; the fields are {', '.join(FIELDS)}")


def register_fact(op: Any, field: str, value: Any) -> None:
    """Record one fact about `op`; a second value for the same fact is an error."""
    _check_field(field)
    rec = _RECORDS.get(op)
    if rec is None:
        rec = _RECORDS[op] = OpRecord(op)
    old = getattr(rec, field)
    if old is not None and old != value:
        raise RuntimeError(f"lazyxla: {op} has two {field} facts: {_describe(old)} and {_describe(value)}")
    setattr(rec, field, value)
    _INDEX[field][op] = value


def registrar(field: str) -> Callable:
    """`registrar("lowering")(aten.a, aten.b)` is a decorator registering its function for each op."""
    def register_in(*ops) -> Callable:
        def deco(fn: Callable) -> Callable:
            for op in ops:
                register_fact(op, field, fn)
            return fn
        return deco
    return register_in


def record(op: Any) -> Optional[OpRecord]:
    """The record of `op`, or None when lazyxla keeps no fact about it (then the op's route
    follows from its schema alone: PyTorch's decomposition or the host fallback)."""
    return _RECORDS.get(op)


@contextmanager
def overriding(op: Any, field: str, value: Any) -> Iterator[None]:
    """Replace one fact for the duration of a `with` block, past the duplicate check:
    for tests that break a rule on purpose. The old value (or its absence) comes back."""
    _check_field(field)
    rec = _RECORDS.setdefault(op, OpRecord(op))
    old = getattr(rec, field)
    setattr(rec, field, value)
    _INDEX[field][op] = value
    try:
        yield
    finally:
        setattr(rec, field, old)
        if old is None:
            _INDEX[field].pop(op, None)
        else:
            _INDEX[field][op] = old


def records() -> Iterator[OpRecord]:
    return iter(list(_RECORDS.values()))


class FactView(Mapping):
    """Read-only {op: value} of one field across every record (what the old tables were)."""
    __slots__ = ("field", "_index")

    def __init__(self, field: str) -> None:
        self.field = field
        self._index = _INDEX[field]

    def get(self, op: Any, default: Any = None) -> Any:
        return self._index.get(op, default)

    def __getitem__(self, op: Any) -> Any:
        return self._index[op]

    def __contains__(self, op: object) -> bool:
        return op in self._index

    def __iter__(self) -> Iterator:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def facts(field: str) -> FactView:
    """The read-only view of one field (e.g. `facts("lowering")` is the old LOWERINGS)."""
    _check_field(field)
    return FactView(field)
