"""lazyxla's settings: every `LAZYXLA_*` environment variable, read here and only here.

Each variable is one field of `Config`: its name is `LAZYXLA_` + the field name in
capitals, its type says how it is parsed, and every flag goes through the one
`parse_bool`, so a variable means the same thing to every module. README's
"Environment variables" table lists the same names; tests/test_config.py keeps the
two in step.

`SETTINGS` is read once, at import. Modules read `config.SETTINGS.<field>` when
they need it, never a copy taken earlier, so `override` (tests) and `reload` reach
every reader (tests/test_config.py checks the readers); the few values that set
something up once at import (noted on the field) need a new process. Run-time modes
whose first value is a setting (aliasing, implied barriers, storage dtypes) read the
setting until a setter changes the mode (lazyxla/state.py).

A leaf module: it imports nothing from lazyxla, so every layer may use it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import typing
from typing import Iterator, Mapping, Optional

PREFIX = "LAZYXLA_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class Config:
    """One field per `LAZYXLA_<FIELD>` variable; the defaults are what an unset (or empty)
    variable means, except for `cache_dir`, where the empty string is a value of its own."""

    aliasing: bool = True
    """Value of `lx.aliasing_enabled()` until `lx.set_aliasing`; off turns all donation off."""
    graph_op_limit: int = 20000
    """Traced ops after which pending work is cut into a graph (read at every op)."""
    implied_barriers: bool = True
    """Value of `lx.implied_barriers_enabled()` until `lx.set_implied_barriers`: `optimizer.step()` ends a step and a
    host read materializes the pending work it shares with live tensors (sync/barriers.py)."""
    crossing_reads: bool = False
    """A host read that shares work with pending tensors whose values it does not compute (the
    gradients, when the loss is read after `backward()`) computes only the values that work
    needs from it and leaves it pending (sync/crossing.py); off: it computes that work too.
    Off: the split step runs slower on XLA:CPU and on the TPU (docs/design.md)."""
    host_read_max_elements: Optional[int] = None
    """A host read whose pending graph has no value larger than this (elements), no random
    op and only scalars as device inputs is computed by eager PyTorch on the host, without
    a device graph (sync/host_eval.py); 0 turns that off; unset: the backend's
    (runtime/backend/)."""
    split_compile_min_equations: Optional[int] = None
    """A graph whose JAX program has at least this many equations compiles as two programs at
    once, run one after the other (compile/split.py: the first step's compile in about the
    time of the larger half); 0 turns that off; unset: the backend's (the TPU's 3000,
    elsewhere off)."""
    host_bookkeeping_max_elements: Optional[int] = None
    """In a host read's graph, integer and boolean values of at most this many elements
    computed from host-known values or small device results (generate()'s growing
    `input_ids`, its stopping checks) are computed on the host, so the device graph keeps
    its shapes (sync/host_split.py); 0 turns that off; unset: the backend's."""
    compile_cache_size: int = 1024
    """Executables kept in the in-memory compile cache (least recently used evicted)."""
    gloo_hostname: Optional[str] = None
    """The address lazyxla's gloo collectives advertise to the other processes of a
    multi-process CPU run; unset: this machine's address on the route to the coordinator
    (lx.distributed)."""
    metrics_samples: int = 1024
    """Samples kept per metric (for metrics created after a change)."""
    cache_dir: Optional[str] = None
    """Root of the persistent compile cache; unset: the user's cache directory
    (`cache_root`), empty: no cache (read at import)."""
    cache_max_mb: float = 2048.0
    """Size bound of the persistent compile cache, in MiB (read at each pruning)."""
    explain_recompiles: bool = False
    """Warn at every compile with the reason, and have dynamo log why it recompiles (dynamo's
    log: read at import)."""
    heap_tuning: bool = True
    """Set glibc's malloc so freed device buffers (CPU backend) stay in the heap for reuse: at
    import one heap for every thread, else at the first device use (runtime/backend/host_heap.py;
    read at import and at the first device use)."""
    gc_management: bool = True
    """Keep Python's garbage collector out of the training step: after the warm-up, freeze what
    exists, collect the young generation at each step barrier instead of during the step
    (runtime/collector.py; read at every step barrier, 0 restores the collector as it was)."""
    split_temporaries: bool = True
    """Where the import could not make one heap (a thread allocated first), compile graphs with
    their XLA temporaries in blocks of at most 16 MiB, which the heap keeps (no page faults each
    step); XLA:CPU cannot write such a graph to the persistent compile cache, so 0 keeps big
    graphs cached instead (runtime/backend/host_heap.py)."""
    exit_timeout: float = 60.0
    """Seconds interpreter exit waits for running work and the lock before going on."""
    provenance: bool = False
    """Record the user's file and line on each IR node (frontend/provenance.py): the first
    value of lx.debug.set_provenance's mode (read at import)."""
    check_ir: bool = False
    """Check every collected graph against the IR's rules before it compiles (ir/check.py):
    for tests and for debugging lazyxla itself; costs a walk of each graph at every sync."""
    step_capture: bool = True
    """Replay a step barrier made of compiled calls (and a few traced ops), once seen, as one
    call of its executable without walking its graph or planning its donors again
    (sync/step_capture.py; read at every step barrier)."""
    storage_dtypes: Optional[str] = None
    """Storage dtype policy until `lx.set_storage_dtypes`, e.g. "float32=bfloat16,int64=int32":
    tensors of the first dtype are held on the device in the second (runtime/storage_dtypes.py)."""

    @property
    def cache_root(self) -> Optional[str]:
        """The persistent compile cache's root directory, None when `LAZYXLA_CACHE_DIR=""`:
        the variable's path, else `$XDG_CACHE_HOME/lazyxla`, else `~/.cache/lazyxla`."""
        if self.cache_dir is not None:
            return os.path.abspath(os.path.expanduser(self.cache_dir)) if self.cache_dir else None
        xdg = os.environ.get("XDG_CACHE_HOME")
        return os.path.join(xdg or os.path.join(os.path.expanduser("~"), ".cache"), "lazyxla")


def env_name(field: str) -> str:
    """The environment variable behind a `Config` field."""
    return PREFIX + field.upper()


def parse_bool(name: str, raw: str) -> bool:
    """The one way a flag is read: 1/true/yes/on or 0/false/no/off, any case."""
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"lazyxla: {name}={raw!r} is not a flag; set it to 1 (or true/yes/on) "
                     "to turn it on, 0 (or false/no/off) to turn it off, or unset it for the default.")


def _parse(field: dataclasses.Field, hint, raw: str):
    name = env_name(field.name)
    if hint is bool:
        return parse_bool(name, raw)
    if hint == Optional[int]:   # a number, or unset for another layer's default
        hint = int
    if hint in (int, float):
        try:
            return hint(raw.strip())
        except ValueError:
            kind = "an integer" if hint is int else "a number"
            raise ValueError(f"lazyxla: {name}={raw!r} is not {kind}; unset it for the default "
                             f"({name}={field.default}) or give {kind}.") from None
    return raw   # Optional[str]: kept as given, the empty string included


def from_env(environ: Optional[Mapping[str, str]] = None) -> Config:
    """A `Config` from `environ` (default: the process environment)."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(Config)
    values = {}
    for field in dataclasses.fields(Config):
        raw = environ.get(env_name(field.name))
        if raw is None:
            continue
        hint = hints[field.name]
        if raw.strip() == "" and hint is not Optional[str]:
            continue   # an empty flag or number means the default
        values[field.name] = _parse(field, hint, raw)
    return Config(**values)


SETTINGS: Config = from_env()


def is_set(field: str) -> bool:
    """Whether the environment names `LAZYXLA_<FIELD>` at all (compat: lazyxla's own
    variable wins over upstream's equivalent only when the user set it)."""
    return env_name(field) in os.environ


def reload() -> Config:
    """Read the environment again (tests, or a program that set a variable after import)."""
    global SETTINGS
    SETTINGS = from_env()
    return SETTINGS


@contextlib.contextmanager
def override(**changes) -> Iterator[Config]:
    """`SETTINGS` with `changes` for the body, restored after (tests)."""
    global SETTINGS
    saved = SETTINGS
    SETTINGS = dataclasses.replace(saved, **changes)
    try:
        yield SETTINGS
    finally:
        SETTINGS = saved
