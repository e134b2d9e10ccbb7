"""Compiled executables on disk by a process-stable digest (compile/stable_key.py): a second
run of a program loads each graph's executable without tracing, lowering or JAX's cache
key (which needs the lowered module). Whole programs and programs compiled in pieces
(compile/split.py `Halves`) alike. Files live beside JAX's entries in the persistent
cache's version directory (compile/disk_cache.py), so they share its bound, its pruning
and its safety checks; `LAZYXLA_CACHE_DIR=""` turns both off. An entry that cannot be read
or loaded is a miss (counted `ExecutableStoreError`), never an error of the step.

Design: docs/design.md, "A second run skips tracing and lowering".
"""
from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any, Optional

from jax.experimental import serialize_executable

from .. import metrics
from . import disk_cache
from .split import Halves

SUFFIX = "-lazyxla-exe"


def _path(digest: str) -> Optional[str]:
    directory = disk_cache.directory()
    return None if directory is None else os.path.join(directory, digest + SUFFIX)


def _pack(compiled) -> Any:
    if isinstance(compiled, Halves):
        return ("halves", _pack(compiled.first), _pack(compiled.second), compiled.first_in, compiled.second_in,
                compiled.handed, compiled.outputs, compiled.handed_bytes)
    return ("whole", *serialize_executable.serialize(compiled))


def _unpack(packed: Any, devices: list):
    if packed[0] == "halves":
        _, first, second, first_in, second_in, handed, outputs, handed_bytes = packed
        return Halves(_unpack(first, devices), _unpack(second, devices), first_in, second_in, handed,
                      outputs, handed_bytes)
    _, serialized, in_tree, out_tree = packed
    return serialize_executable.deserialize_and_load(serialized, in_tree, out_tree, execution_devices=devices)


def load(digest: str, devices: list):
    """The executable stored under `digest`, loaded onto `devices`, or None."""
    path = _path(digest)
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            compiled = _unpack(pickle.load(f), devices)
        os.utime(path)   # recently used: pruned last
    except Exception:  # noqa: BLE001 - a torn, stale or foreign entry (or one pruned meanwhile) is a miss
        metrics.counter_add("ExecutableStoreError")
        return None
    metrics.counter_add("ExecutableStoreHit")
    return compiled


def store(digest: str, compiled) -> None:
    """Keep `compiled` under `digest` (written whole or not at all); an executable XLA
    cannot serialize (XLA:CPU with temporaries in several blocks) is not kept."""
    path = _path(digest)
    if path is None:
        return
    tmp = None
    try:
        blob = pickle.dumps(_pack(compiled), protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - the cache is an optimisation: the step goes on
        metrics.counter_add("ExecutableStoreError")
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        return
    metrics.counter_add("ExecutableStoreWrite")
