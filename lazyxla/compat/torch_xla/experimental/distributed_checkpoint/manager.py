"""`CheckpointManager`: lazyxla's own (`lx.spmd.CheckpointManager`: atomic commits,
preemption saves, checked restores) under upstream's keyword names.

Layout: `<path>/<step>/` is a DCP checkpoint, committed by renaming `<path>/<step>.tmp/`
once its marker `.lazyxla_commit` is written (lazyxla/spmd/commit.py); `max_to_keep` drops
the oldest by creation, also across runs. An asynchronous save snapshots the state on the
host before returning, so training may change the tensors right away.
"""
from __future__ import annotations

from typing import Optional

import torch.distributed as dist

import lazyxla as lx

from ....unsupported import unsupported_names


class CheckpointManager(lx.spmd.CheckpointManager):
    def __init__(self, path: str, save_interval: int, max_to_keep: Optional[int] = 0,
                 max_pending_async: Optional[int] = 1, process_group: Optional[dist.ProcessGroup] = None,
                 chkpt_on_preemption: bool = True) -> None:
        super().__init__(path, save_interval, max_to_keep or 0, max_pending_async=max_pending_async or 1,
                         process_group=process_group, save_on_preemption=chkpt_on_preemption)
        self.chkpt_on_preemption = chkpt_on_preemption


__getattr__ = unsupported_names(__name__)
