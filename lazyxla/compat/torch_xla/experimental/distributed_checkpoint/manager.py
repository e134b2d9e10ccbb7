"""`CheckpointManager`: numbered checkpoints in one folder, taken every `save_interval`
steps (or when a preemption is noticed), synchronously or from a background thread,
through lx.spmd.checkpoint (torch.distributed.checkpoint).

Layout: `<path>/<step>/` is a DCP checkpoint; a file `.lazyxla_step` in it, written last
by process 0, marks it complete and records when it was taken, so that `max_to_keep`
drops the oldest by creation (not by step) also across runs. An asynchronous save
snapshots the state on the host (`sharded_cpu_state_dict`) before returning, so training
may change the tensors right away.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import threading
import time
from typing import List, Optional

import torch.distributed as dist

import lazyxla as lx
from lazyxla.spmd import checkpoint as _ck

from ....unsupported import unsupported_names
from ... import _preemption

_MARK = ".lazyxla_step"


class CheckpointManager:
    def __init__(self, path: str, save_interval: int, max_to_keep: Optional[int] = 0,
                 max_pending_async: Optional[int] = 1, process_group: Optional[dist.ProcessGroup] = None,
                 chkpt_on_preemption: bool = True) -> None:
        if save_interval < 1:
            raise ValueError(f"CheckpointManager: save_interval must be >= 1, got {save_interval}")
        self.base_path = os.fspath(path)
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep or 0
        self.process_group = process_group
        self.chkpt_on_preemption = chkpt_on_preemption
        if chkpt_on_preemption:
            _preemption.activate()
        self._lock = threading.Lock()
        self._tracked = self._load_tracked()     # [(created_ns, step)], oldest first
        self._queue: "queue.Queue" = queue.Queue(maxsize=max(1, max_pending_async or 1))
        self._worker = threading.Thread(target=self._run_async, daemon=True, name="lazyxla-checkpoint")
        self._worker.start()

    # -- bookkeeping ------------------------------------------------------------------

    def _path(self, step: int) -> str:
        return os.path.join(self.base_path, str(step))

    def _load_tracked(self) -> list:
        found = []
        if os.path.isdir(self.base_path):
            for name in os.listdir(self.base_path):
                mark = os.path.join(self.base_path, name, _MARK)
                if os.path.isfile(mark):
                    with open(mark) as f:
                        info = json.load(f)
                    found.append((info["created_ns"], info["step"]))
        return sorted(found)

    def _is_writer(self) -> bool:
        rank = dist.get_rank(self.process_group) if dist.is_initialized() else lx.distributed.process_index()
        return rank == 0

    def _barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier(self.process_group)

    def _save(self, step: int, state_dict: dict) -> None:
        """Write checkpoint `step` (replacing one of that step), mark it, drop the oldest."""
        path = self._path(step)
        with self._lock:
            self._tracked = [(t, s) for t, s in self._tracked if s != step]
        if self._is_writer() and os.path.isdir(path):
            shutil.rmtree(path)
        self._barrier()
        _ck.save(state_dict, path, process_group=self.process_group)
        created = time.time_ns()
        if self._is_writer():
            with open(os.path.join(path, _MARK), "w") as f:
                json.dump({"step": step, "created_ns": created}, f)
        with self._lock:
            self._tracked.append((created, step))
            while self.max_to_keep and len(self._tracked) > self.max_to_keep:
                _, oldest = self._tracked.pop(0)
                if self._is_writer():
                    shutil.rmtree(self._path(oldest), ignore_errors=True)
        self._barrier()

    def _run_async(self) -> None:
        while True:
            save, step, snapshot, started = self._queue.get()
            started.set()
            try:
                save(step, snapshot)
            finally:
                self._queue.task_done()

    # -- upstream's interface -----------------------------------------------------------

    def should_save(self, step: int) -> bool:
        """Every `save_interval` steps, or once a preemption was noticed."""
        return step % self.save_interval == 0 or self.reached_preemption(step)

    def save(self, step: int, state_dict: dict, force: Optional[bool] = False) -> bool:
        """Checkpoint `state_dict` now if `should_save(step)` or `force`; True if it did."""
        if not (force or self.should_save(step)):
            return False
        self._save(step, state_dict)
        return True

    def save_async(self, step: int, state_dict: dict, force: Optional[bool] = False) -> bool:
        """As `save`, written by a background thread from a host snapshot taken now;
        blocks while `max_pending_async` saves are still queued, and returns once the
        thread has taken this one up."""
        if not (force or self.should_save(step)):
            return False
        started = threading.Event()
        self._queue.put((self._save, step, _ck.sharded_cpu_state_dict(state_dict), started))
        started.wait()
        return True

    def restore(self, step: int, state_dict: dict) -> None:
        """Load checkpoint `step` into `state_dict` in place (shardings kept)."""
        if step not in self.all_steps():
            raise ValueError(f"CheckpointManager: no complete checkpoint of step {step} in {self.base_path}; "
                             f"tracked steps: {self.all_steps()}")
        _ck.load(state_dict, self._path(step), process_group=self.process_group)

    def all_steps(self) -> List[int]:
        with self._lock:
            return [s for _, s in self._tracked]

    def join(self) -> None:
        """Wait for the pending asynchronous saves."""
        self._queue.join()

    def reached_preemption(self, step: int) -> bool:
        return self.chkpt_on_preemption and _preemption.sync_point_reached(step)


__getattr__ = unsupported_names(__name__)
