"""The persistent compile cache: compiled executables kept on disk across processes.

This is JAX's own persistent compilation cache pointed at a directory lazyxla chooses
and guards: `$LAZYXLA_CACHE_DIR`, else `$XDG_CACHE_HOME/lazyxla`, else `~/.cache/lazyxla`
(`LAZYXLA_CACHE_DIR=""` turns it off), with entries in a `v-<hash>` subdirectory per
lazyxla, torch, jax and jaxlib version and `XLA_FLAGS`. The directory lazyxla creates is
private (0700); one that other users can write to or that another user owns is refused,
and one that cannot be written is skipped, each with a warning. `LAZYXLA_CACHE_MAX_MB`
(default 2048) bounds the whole directory: the oldest entries go, at start and every
`_PRUNE_EVERY` compiles. Counter `PersistentCacheHit`: executables loaded from disk
instead of compiled.

Design: docs/design.md, "The persistent compile cache" and "compile/disk_cache.py".
"""
from __future__ import annotations

import hashlib
import os
import stat
import threading
import warnings
from typing import Optional

import jax
import jaxlib
import torch

from .. import config, metrics, patches
from .._versions import LAZYXLA_VERSION

_PRUNE_EVERY = 64
_ENTRY_SUFFIX = "-cache"   # JAX's file name for an entry (lru_cache._CACHE_SUFFIX)


class _State:
    directory: Optional[str] = None   # the v-<hash> directory in use, None when off
    requests = 0
    lock = threading.Lock()


def base_dir() -> Optional[str]:
    """The cache root the settings ask for, None when `LAZYXLA_CACHE_DIR=""`."""
    return config.SETTINGS.cache_root


def version_tag() -> str:
    """`v-<hash>` of everything that makes an executable unusable by another setup."""
    parts = [f"lazyxla={LAZYXLA_VERSION}", f"torch={torch.__version__}", f"jax={jax.__version__}",
             f"jaxlib={jaxlib.__version__}", f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}",
             f"LIBTPU_INIT_ARGS={os.environ.get('LIBTPU_INIT_ARGS', '')}"]
    return "v-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _unsafe_reason(path: str) -> Optional[str]:
    """Why `path` must not hold executables (None if it may)."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"other users can write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _prepare(root: str) -> Optional[str]:
    """Create and check root and its version subdirectory; the subdirectory, or None
    (with a warning) when the cache cannot be used safely."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        why = _unsafe_reason(root)
        if why is None:
            sub = os.path.join(root, version_tag())
            os.makedirs(sub, mode=0o700, exist_ok=True)
            why = _unsafe_reason(sub)
            if why is None and not os.access(sub, os.W_OK | os.X_OK):
                why = "it cannot be written"
            root = sub
    except OSError as e:
        why = f"it cannot be created or written ({e.strerror or e})"
    if why is None:
        return root
    warnings.warn(
        f"lazyxla: the persistent compile cache is off for this run: {root} is not usable because "
        f"{why}. Compiled executables are native code loaded into this process, so lazyxla keeps "
        "them only in a directory that is yours alone and writable (mode 0700). Point "
        "LAZYXLA_CACHE_DIR at such a directory, fix this one (chmod 700), or set "
        "LAZYXLA_CACHE_DIR=\"\" to turn the cache off without this warning.", stacklevel=3)
    return None


def prune(root: Optional[str] = None, max_bytes: Optional[int] = None) -> int:
    """Remove the oldest entries under the cache root until it fits the bound; bytes removed."""
    root = root or (os.path.dirname(_State.directory) if _State.directory else None)
    if root is None:
        return 0
    bound = int(config.SETTINGS.cache_max_mb * 2**20) if max_bytes is None else max_bytes   # LAZYXLA_CACHE_MAX_MB
    entries = []
    for sub in os.scandir(root):
        if not (sub.is_dir(follow_symlinks=False) and sub.name.startswith("v-")):
            continue
        for f in os.scandir(sub.path):
            if f.is_file(follow_symlinks=False):
                st = f.stat(follow_symlinks=False)
                entries.append((st.st_mtime_ns, f.path, st.st_size))
    total = sum(size for _, _, size in entries)
    removed = 0
    for _, path, size in sorted(entries):
        if total <= bound:
            break
        try:
            os.remove(path)
        except OSError:
            continue   # another process removed it first
        total -= size
        removed += size
    return removed


def _on_event(event: str, **_kwargs) -> None:
    if _State.directory is None:
        return
    if event == "/jax/compilation_cache/cache_hits":
        metrics.counter_add("PersistentCacheHit")
    elif event == "/jax/compilation_cache/compile_requests_use_cache":
        with _State.lock:
            _State.requests += 1
            due = _State.requests % _PRUNE_EVERY == 0
        if due:
            try:
                prune()
            except OSError:
                pass   # the bound is kept at the next try


def enable() -> Optional[str]:
    """Point JAX's persistent cache at lazyxla's directory (called once at import);
    the directory in use, or None when the cache is off."""
    root = base_dir()
    directory = _prepare(root) if root else None
    _State.directory = directory
    if directory is None:
        return None
    patches.apply("jax_persistent_cache", directory)
    try:
        prune()
    except OSError:
        pass
    patches.apply("jax_cache_listener", _on_event)
    return directory


def directory() -> Optional[str]:
    """The `v-<hash>` directory this process reads and writes, None when the cache is off."""
    return _State.directory


def entry_paths() -> list[str]:
    """Entry files in this process's cache directory (tests, `lx.debug`)."""
    d = _State.directory
    if d is None:
        return []
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(_ENTRY_SUFFIX))
