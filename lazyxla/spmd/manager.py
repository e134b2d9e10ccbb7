"""`lx.spmd.CheckpointManager`: numbered checkpoints in one folder, committed atomically
(commit.py), taken every `save_interval` steps or when a preemption notice arrives
(preemption.py), synchronously or from a background thread, through lx.spmd.checkpoint
(torch.distributed.checkpoint). PyTorch/XLA's `CheckpointManager` is this class under its
upstream keyword names (lazyxla.compat).

Only committed checkpoints are listed (`all_steps()`), so a save killed at any instant
leaves the previous ones as they were. A failed save (a full disk) raises
`lx.CheckpointError` naming the step and the cause, after removing its partial files; a
damaged checkpoint raises one naming the file when restored (sizes and CRC-32 checked
first, `verify=False` skips the check).

Usage (the training loop, `restore_latest`, preemption): docs/spmd.md, "Numbered checkpoints that survive kills".
"""
from __future__ import annotations

import os
import queue
import threading
from typing import List, Optional

import jax
import torch
import torch.distributed as dist

from ..errors import CheckpointError
from . import checkpoint as _ck
from . import commit, preemption


class CheckpointManager:
    def __init__(self, path: str, save_interval: int, max_to_keep: int = 0, *, max_pending_async: int = 1,
                 process_group: Optional[dist.ProcessGroup] = None, save_on_preemption: bool = True,
                 verify: bool = True) -> None:
        if save_interval < 1:
            raise ValueError(f"CheckpointManager: save_interval must be >= 1, got {save_interval}")
        self.base_path = os.fspath(path)
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep or 0
        self.process_group = process_group
        self.save_on_preemption = save_on_preemption
        self.verify = verify
        if save_on_preemption:
            preemption.activate()
        if self._is_writer():
            os.makedirs(self.base_path, exist_ok=True)
            commit.remove_stale(self.base_path)   # saves killed before they committed
        self._barrier()
        self._lock = threading.Lock()
        self._tracked = commit.committed(self.base_path)     # [(created_ns, step)], oldest first
        self._queue: "queue.Queue" = queue.Queue(maxsize=max(1, max_pending_async or 1))
        self._async_error: Optional[BaseException] = None
        self._worker = threading.Thread(target=self._run_async, daemon=True, name="lazyxla-checkpoint")
        self._worker.start()

    # -- processes -------------------------------------------------------------------------

    def _rank(self) -> int:
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(self.process_group)
        return jax.process_index()

    def _is_writer(self) -> bool:
        return self._rank() == 0

    def _barrier(self) -> None:
        if dist.is_available() and dist.is_initialized():
            dist.barrier(self.process_group)

    def _gather(self, files: dict) -> dict:
        """Every process's manifest, merged (on one process: its own)."""
        if not (dist.is_available() and dist.is_initialized()):
            return files
        parts: list = [None] * dist.get_world_size(self.process_group)
        dist.all_gather_object(parts, files, group=self.process_group)
        return {k: v for part in parts for k, v in part.items()}

    # -- saving ----------------------------------------------------------------------------

    def _first_error(self, error: Optional[str]) -> Optional[str]:
        """The first process's error message among all processes' (None: all went well)."""
        if not (dist.is_available() and dist.is_initialized()):
            return error
        parts: list = [None] * dist.get_world_size(self.process_group)
        dist.all_gather_object(parts, error, group=self.process_group)
        return next((p for p in parts if p is not None), None)

    def _save(self, step: int, state_dict: dict) -> None:
        """Write checkpoint `step` into its temporary folder, commit it, drop the oldest."""
        tmp = commit.tmp_dir(self.base_path, step)
        try:
            if self._is_writer() and os.path.isdir(tmp):
                commit.discard(tmp)
            self._barrier()
            _ck.save(state_dict, tmp, process_group=self.process_group)   # DCP: a failure fails all
            files = self._gather(commit.manifest(tmp, commit.own_files(tmp, self._rank())))
            error = None
            if self._is_writer():
                try:
                    commit.commit(self.base_path, step, files)
                except OSError as e:
                    error = f"{type(e).__name__}: {e}"
            error = self._first_error(error)
            if error is not None:
                raise CheckpointError(f"committing failed: {error}")
        except Exception as e:
            where = commit.describe_failure(tmp, e) if os.path.isdir(tmp) else ""
            if self._is_writer() and os.path.isdir(tmp):
                commit.discard(tmp)
            raise CheckpointError(
                f"lazyxla checkpoint: saving step {step} into {commit.final_dir(self.base_path, step)} failed"
                f"{' ' + where if where else ''}: {type(e).__name__}: {e}. Nothing was committed; the earlier "
                f"checkpoints are intact "
                f"(steps {self.all_steps()}). Free space or fix the cause, and save again.") from e
        with self._lock:
            if self._is_writer():
                kept = commit.committed(self.base_path)
                while self.max_to_keep and len(kept) > self.max_to_keep:
                    _, oldest = kept.pop(0)
                    commit.discard(commit.final_dir(self.base_path, oldest))
        self._barrier()
        with self._lock:
            self._tracked = commit.committed(self.base_path)

    def _run_async(self) -> None:
        while True:
            save, step, snapshot, started = self._queue.get()
            started.set()
            try:
                save(step, snapshot)
            except BaseException as e:   # reported by the next call of join() / save_async()
                self._async_error = e
            finally:
                self._queue.task_done()

    def _raise_async_error(self) -> None:
        error, self._async_error = self._async_error, None
        if error is not None:
            raise error

    def should_save(self, step: int) -> bool:
        """Every `save_interval` steps, or at the step a preemption notice asks for (call it,
        or `save`, at every step: with several processes it is a collective)."""
        preempted = self.reached_preemption(step)
        return step % self.save_interval == 0 or preempted

    def save(self, step: int, state_dict: dict, force: bool = False) -> bool:
        """Checkpoint `state_dict` now if `should_save(step)` or `force`; True if it did."""
        if not (self.should_save(step) or force):
            return False
        self._save(step, state_dict)
        return True

    def save_async(self, step: int, state_dict: dict, force: bool = False) -> bool:
        """As `save`, written by a background thread from a host snapshot taken now; blocks
        while `max_pending_async` saves are still queued. A failure is raised by the next
        `save_async` or `join`."""
        self._raise_async_error()
        if not (self.should_save(step) or force):
            return False
        started = threading.Event()
        self._queue.put((self._save, step, _ck.sharded_cpu_state_dict(state_dict), started))
        started.wait()
        return True

    def join(self) -> None:
        """Wait for the pending asynchronous saves; raise the error of one that failed."""
        self._queue.join()
        self._raise_async_error()

    # -- restoring -------------------------------------------------------------------------

    def all_steps(self) -> List[int]:
        """Steps of the committed checkpoints, oldest first."""
        with self._lock:
            return [s for _, s in self._tracked]

    def latest_step(self) -> Optional[int]:
        """The largest committed step, or None."""
        steps = self.all_steps()
        return max(steps) if steps else None

    def restore(self, step: int, state_dict: dict) -> None:
        """Load checkpoint `step` into `state_dict` in place (shardings kept); the files are
        checked against their commit marker first (`verify`)."""
        if step not in self.all_steps():
            raise ValueError(f"CheckpointManager: no complete checkpoint of step {step} in {self.base_path}; "
                             f"committed steps: {self.all_steps()}")
        path = commit.final_dir(self.base_path, step)
        if self.verify:
            commit.verify(path)
        try:
            _ck.load(state_dict, path, process_group=self.process_group)
        except Exception as e:
            raise CheckpointError(f"lazyxla checkpoint: restoring step {step} from {path} failed: "
                                  f"{type(e).__name__}: {e}") from e

    def restore_latest(self, state_dict: dict, optimizer: Optional[torch.optim.Optimizer] = None) -> int:
        """Restore the latest committed checkpoint into `state_dict`, if there is one, and
        return its step (0 when there is none: start from scratch). With `optimizer`, its
        state is created first (`prime_optimizer`) and its `load_state_dict` called with
        `state_dict["optim"]` afterwards."""
        step = self.latest_step()
        if step is None:
            return 0
        if optimizer is not None:
            _ck.prime_optimizer(optimizer)
            state_dict["optim"] = optimizer.state_dict()
        self.restore(step, state_dict)
        if optimizer is not None:
            optimizer.load_state_dict(state_dict["optim"])
        return step

    def reached_preemption(self, step: int) -> bool:
        """True at the step to checkpoint because of a preemption notice (SIGTERM)."""
        return self.save_on_preemption and preemption.reached(step)
