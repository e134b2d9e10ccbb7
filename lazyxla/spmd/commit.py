"""Committing checkpoints atomically, as Orbax does (docs/reliability.md, "Checkpoints").

A checkpoint of step `s` is written into `<base>/s.tmp/`; once every process has
written its files, process 0 writes the commit marker `s.tmp/.lazyxla_commit` (the step,
when, and the size and CRC-32 of every file), flushes it to disk and renames the folder
to `<base>/s/` (one atomic `rename`). So a folder named by a step number that holds
a marker is complete, whatever instant a save was killed at, and `committed()` lists
only those. A folder being dropped is renamed back to a `.tmp` name first, so a kill
during the removal never leaves a half-deleted committed checkpoint. `.tmp` folders are
leftovers of killed saves: `remove_stale` deletes them.

Pure file handling: no lazyxla tensors here.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import time
import zlib
from typing import Iterable, Optional

from ..errors import CheckpointError

MARKER = ".lazyxla_commit"
LEGACY_MARKER = ".lazyxla_step"   # written last by earlier lazyxla releases: complete, no manifest
TMP = ".tmp"
_CHUNK = 1 << 22


def final_dir(base: str, step: int) -> str:
    return os.path.join(base, str(step))


def tmp_dir(base: str, step: int) -> str:
    return os.path.join(base, f"{step}{TMP}")


def committed(base: str) -> list[tuple[int, int]]:
    """(created_ns, step) of every committed checkpoint in `base`, oldest first."""
    found = []
    if not os.path.isdir(base):
        return found
    for name in os.listdir(base):
        if not name.isdigit():
            continue
        for marker in (MARKER, LEGACY_MARKER):
            path = os.path.join(base, name, marker)
            if os.path.isfile(path):
                info = read_marker(path)
                found.append((info["created_ns"], info["step"]))
                break
    return sorted(found)


def read_marker(path: str) -> dict:
    try:
        with open(path) as f:
            info = json.load(f)
        int(info["step"]), int(info["created_ns"])
        return info
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"lazyxla checkpoint: the commit marker {path} is damaged ({e}); delete the "
                              f"folder {os.path.dirname(path)} to fall back to the checkpoint before it") from e


def checksum(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def manifest(directory: str, names: Iterable[str]) -> dict:
    """{name: [size, crc32]} of the files `names` in `directory`."""
    return {n: [os.path.getsize(os.path.join(directory, n)), checksum(os.path.join(directory, n))] for n in names}


def own_files(directory: str, process: int) -> list[str]:
    """The files of `directory` written by `process`: DCP names them `__<process>_<i>.distcp`;
    process 0 also owns the others (DCP's `.metadata`)."""
    names = sorted(n for n in os.listdir(directory) if n != MARKER)
    if process == 0:
        return [n for n in names if not n.startswith("__") or n.startswith("__0_")]
    return [n for n in names if n.startswith(f"__{process}_")]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(base: str, step: int, files: dict, created_ns: Optional[int] = None) -> int:
    """Write the marker into `tmp_dir(base, step)` and rename it to `final_dir(base, step)`
    (an existing checkpoint of that step is replaced); returns the creation time."""
    tmp, final = tmp_dir(base, step), final_dir(base, step)
    created = created_ns or time.time_ns()
    with open(os.path.join(tmp, MARKER), "w") as f:
        json.dump({"step": step, "created_ns": created, "files": files}, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if os.path.isdir(final):
        discard(final)
    os.rename(tmp, final)
    _fsync_dir(base)
    return created


def discard(path: str) -> None:
    """Remove a checkpoint folder: uncommitted by a rename first, then deleted."""
    parent, name = os.path.split(path.rstrip(os.sep))
    doomed = os.path.join(parent, f"{name}.drop-{time.time_ns()}{TMP}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def remove_stale(base: str) -> list[str]:
    """Delete the `.tmp` folders in `base` (saves that never committed); their names."""
    if not os.path.isdir(base):
        return []
    stale = [n for n in os.listdir(base) if n.endswith(TMP) and os.path.isdir(os.path.join(base, n))]
    for n in stale:
        shutil.rmtree(os.path.join(base, n), ignore_errors=True)
    return stale


def describe_failure(tmp: str, error: BaseException) -> str:
    """What a failed save left to say: the file it was writing (the newest in `tmp`) and
    whether the disk is full (torch's writer reports a full disk as a bare position
    mismatch, `unexpected pos`, without the errno)."""
    notes = []
    try:
        files = [os.path.join(tmp, n) for n in os.listdir(tmp)]
        if files:
            newest = max(files, key=os.path.getmtime)
            notes.append(f"while writing {newest} ({os.path.getsize(newest)} bytes written)")
    except OSError:
        pass
    errnos = set()
    e: Optional[BaseException] = error
    while e is not None:
        if isinstance(e, OSError) and e.errno is not None:
            errnos.add(e.errno)
        e = e.__cause__ or e.__context__
    try:
        free = shutil.disk_usage(os.path.dirname(tmp.rstrip(os.sep))).free
    except OSError:
        free = None
    if errno.ENOSPC in errnos or (free is not None and free < 1 << 20):
        notes.append(f"the disk is full ({free} bytes free)" if free is not None else "the disk is full")
    return "; ".join(notes)


def verify(directory: str) -> None:
    """Check every file of a committed checkpoint against its marker's manifest (size, then
    CRC-32); a `CheckpointError` names the first file that differs or is missing."""
    path = os.path.join(directory, MARKER)
    if not os.path.isfile(path):
        return   # a legacy marker: nothing recorded to check against
    for name, (size, crc) in read_marker(path).get("files", {}).items():
        file = os.path.join(directory, name)
        fix = ("the checkpoint is damaged; restore an earlier step (all_steps()) or delete the folder "
               f"{directory}")
        if not os.path.isfile(file):
            raise CheckpointError(f"lazyxla checkpoint: {file} is missing: {fix}")
        actual = os.path.getsize(file)
        if actual != size:
            raise CheckpointError(f"lazyxla checkpoint: {file} has {actual} bytes, {size} were written: {fix}")
        if checksum(file) != crc:
            raise CheckpointError(f"lazyxla checkpoint: {file} does not match the checksum written with it: {fix}")
