"""Distributed checkpoints of lazyxla tensors with PyTorch's own engine,
`torch.distributed.checkpoint` (DCP).

`save(state_dict, path)` / `load(state_dict, path)` run `dcp.save` / `dcp.load` with the
planners below (`planner=SavePlanner()` / `LoadPlanner()` with DCP's own calls do the
same). State dicts are those of models and optimizers, whose tensors may be lazyxla
tensors, sharded (SPMD) or not. Saving writes every element once over all processes (DCP
records the chunks with their offsets in its metadata); loading keeps each target tensor's
sharding, reads only the chunks that overlap its own devices' shards (a checkpoint from
another mesh, or unsharded, reshards) and replaces the tensor's value in place. Several
processes need `torch.distributed` initialised (gloo) beside `lx.distributed.initialize`.

How saving and loading work: docs/spmd.md, "Checkpoints".
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Optional

import jax
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import (DefaultLoadPlanner, DefaultSavePlanner,
                                                          create_default_local_load_plan,
                                                          create_default_local_save_plan)
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import ReadItem, SavePlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

from ..frontend.tensor import LazyTensor
from ..ir.build import data_node
from ..ir.node import DATA
from ..lock import LOCK
from ..runtime import placement
from ..runtime.transfer import download, upload
from ..sync.api import sync_tensors

__all__ = ["save", "load", "SavePlanner", "LoadPlanner", "CpuShards", "sharded_cpu_state_dict", "is_sharded",
           "prime_optimizer"]


@dataclasses.dataclass
class Shard:
    """One distinct shard: where it sits in the global tensor, and its data (a JAX
    single-device array, or a CPU tensor once copied)."""
    offsets: tuple
    sizes: tuple
    data: Any


@dataclasses.dataclass
class CpuShards:
    """Host copies of the shards of one sharded tensor held by this process
    (`sharded_cpu_state_dict`): a snapshot that later writes read, e.g. from a
    background thread while training goes on."""
    shards: list
    global_size: torch.Size
    dtype: torch.dtype


def _array(t: LazyTensor):
    """The JAX array behind `t` (device data; the caller synced pending values)."""
    value = t.checked_value()
    if value.op is not DATA:
        raise RuntimeError("lazyxla checkpoint: a tensor is still pending after the sync; please report this")
    return value.data.live_array()


def is_sharded(t: Any) -> bool:
    """True for a lazyxla tensor whose value is split over several devices (SPMD), and
    for `CpuShards`."""
    if isinstance(t, CpuShards):
        return True
    if not isinstance(t, LazyTensor) or t._view is not None or not placement.spmd_enabled():
        return False
    with LOCK:
        value = t.checked_value()
        if value.op is not DATA:
            return False   # pending: decided at the sync before saving
        return not placement.sharding_of(value.data).is_fully_replicated


def _local_shards(t: LazyTensor) -> list:
    """This process's distinct shards of `t` (one per index) with their JAX
    `replica_id`, in device order."""
    with LOCK:
        array = _array(t)
        shards, seen = [], set()
        for s in sorted(array.addressable_shards, key=lambda s: s.device.id):
            offsets = tuple(sl.start or 0 for sl in s.index)
            sizes = tuple(s.data.shape)
            if offsets not in seen:
                seen.add(offsets)
                shards.append((Shard(offsets, sizes, s.data), s.replica_id))
        return shards


def _sync(values) -> None:
    """Materialise the pending lazyxla tensors among `values` (one graph), donating nothing."""
    pending = [v for v in values if isinstance(v, LazyTensor) and v.checked_value().op is not DATA]
    if pending:
        sync_tensors(pending, wait=True, donate_inplace=False)


def _leaves(obj: Any):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def sharded_cpu_state_dict(state_dict: dict) -> dict:
    """A copy of `state_dict` (nested) with every sharded lazyxla tensor replaced by the
    `CpuShards` of this process and every other lazyxla tensor by a CPU copy."""
    _sync(list(_leaves(state_dict)))

    def convert(obj):
        if isinstance(obj, dict):
            return type(obj)((k, convert(v)) for k, v in obj.items())
        if isinstance(obj, list):
            return [convert(v) for v in obj]
        if isinstance(obj, LazyTensor):
            if is_sharded(obj):
                shards = [Shard(s.offsets, s.sizes, download(s.data, obj.dtype)) for s, replica in
                          _local_shards(obj) if replica == 0]
                return CpuShards(shards, obj.size(), obj.dtype)
            return obj.cpu()
        return obj
    return convert(state_dict)


class SavePlanner(DefaultSavePlanner):
    """DCP's default save planner, plus lazyxla tensors: sharded ones are written shard
    by shard by the processes holding them, others as host copies (module docstring).
    `sharded_state_dict` / `unsharded_state_dict` hold the flattened entries of each kind."""

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator: bool = False) -> None:
        _sync(list(_leaves(state_dict)))
        super().set_up_planner(state_dict, storage_meta, is_coordinator)
        self.sharded_state_dict = {k: v for k, v in self.state_dict.items() if is_sharded(v)}
        self.unsharded_state_dict = {k: (v.cpu() if isinstance(v, LazyTensor) else v)
                                     for k, v in self.state_dict.items() if k not in self.sharded_state_dict}
        self._shard_data: dict = {}

    def create_local_plan(self) -> SavePlan:
        plan = create_default_local_save_plan(self.unsharded_state_dict, self.is_coordinator)
        items = list(plan.items)
        for fqn, value in self.sharded_state_dict.items():
            if isinstance(value, CpuShards):
                shards, size, dtype = value.shards, value.global_size, value.dtype
            else:
                shards = [s for s, replica in _local_shards(value) if replica == 0]
                size, dtype = value.size(), value.dtype
            for i, shard in enumerate(shards):
                offsets = torch.Size(shard.offsets)
                index = MetadataIndex(fqn, offsets, i)
                self._shard_data[(fqn, offsets)] = (shard, dtype)
                items.append(WriteItem(
                    index=index, type=WriteItemType.SHARD,
                    tensor_data=TensorWriteData(
                        chunk=ChunkStorageMetadata(offsets=offsets, sizes=torch.Size(shard.sizes)),
                        properties=TensorProperties(dtype=dtype), size=torch.Size(size))))
        plan = dataclasses.replace(plan, items=items)
        if self.flatten_state_dict:
            plan = dataclasses.replace(plan, planner_data=self.mappings)
        self.plan = plan
        return plan

    def resolve_data(self, write_item: WriteItem):
        key = (write_item.index.fqn, write_item.index.offset)
        if key in self._shard_data:
            shard, dtype = self._shard_data[key]
            return shard.data if isinstance(shard.data, torch.Tensor) else download(shard.data, dtype)
        return self.transform_object(write_item, self.lookup_object(write_item.index))

    def lookup_object(self, index: MetadataIndex) -> Any:
        return self.unsharded_state_dict[index.fqn]


class LoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, plus lazyxla tensors, which keep their sharding and
    read only the chunks their local shards need (module docstring).
    `sharded_state_dict` / `unsharded_state_dict` hold the flattened entries of each kind."""

    def set_up_planner(self, state_dict, metadata=None, is_coordinator: bool = False) -> None:
        _sync(list(_leaves(state_dict)))
        super().set_up_planner(state_dict, metadata, is_coordinator)
        self.sharded_state_dict = {k: v for k, v in self.state_dict.items() if is_sharded(v)}
        self.unsharded_state_dict = {k: v for k, v in self.state_dict.items() if k not in self.sharded_state_dict}
        self._lazy = {k: v for k, v in self.state_dict.items() if isinstance(v, LazyTensor)}
        self._host: dict = {}      # fqn -> host buffer of the full shape receiving the reads
        self._pending: dict = {}   # fqn -> read items not committed yet

    def create_local_plan(self):
        others = {k: v for k, v in self.state_dict.items() if k not in self._lazy}
        plan = create_default_local_load_plan(others, self.metadata, not self.allow_partial_load)
        items = list(plan.items)
        for fqn, t in self._lazy.items():
            md = self.metadata.state_dict_metadata.get(fqn)
            if md is None:
                if self.allow_partial_load:
                    continue
                raise RuntimeError(f"Missing key in checkpoint state_dict: {fqn}.")
            if not isinstance(md, TensorStorageMetadata) or md.size != t.size():
                raise ValueError(f"lazyxla checkpoint: {fqn} is a tensor of size {tuple(t.size())} here but "
                                 f"{getattr(md, 'size', type(md).__name__)} in the checkpoint")
            if fqn in self.sharded_state_dict:
                chunks = [ChunkStorageMetadata(torch.Size(s.offsets), torch.Size(s.sizes))
                          for s, _ in _local_shards(t)]
            else:
                chunks = [ChunkStorageMetadata(torch.Size([0] * t.dim()), t.size())]
            reads = create_read_items_for_chunk_list(fqn, md, chunks)
            self._pending[fqn] = len(reads)
            items += reads
        return dataclasses.replace(plan, items=items)

    def resolve_tensor(self, read_item: ReadItem) -> torch.Tensor:
        fqn = read_item.dest_index.fqn
        if fqn not in self._lazy:
            return super().resolve_tensor(read_item)
        t = self._lazy[fqn]
        host = self._host.get(fqn)
        if host is None:
            host = self._host[fqn] = torch.zeros(t.size(), dtype=t.dtype)
        view = host
        for dim, (base, offset, length) in enumerate(zip(read_item.dest_index.offset, read_item.dest_offsets,
                                                         read_item.lengths)):
            view = view.narrow(dim, base + offset, length)
        return view

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        fqn = read_item.dest_index.fqn
        if fqn not in self._lazy:
            return super().commit_tensor(read_item, tensor)
        self._pending[fqn] -= 1
        if self._pending[fqn] == 0:   # every read of this tensor landed: install it
            _assign(self._lazy[fqn], self._host.pop(fqn))


def _assign(t: LazyTensor, host: torch.Tensor) -> None:
    """Replace the value of `t` by `host` in place, keeping its sharding (only the slices
    of this process's devices are read from `host`)."""
    if t._view is not None:
        with torch.no_grad():
            t.copy_(host)
        return
    with LOCK:
        st = t._st
        old = t.checked_value().data
        sharding = old.sharding if placement.spmd_enabled() else None
        st.write(data_node(upload(host, old.device, owner=st, sharding=sharding)))


def _check_processes() -> None:
    if jax.process_count() > 1 and not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "lazyxla checkpoint: several processes run (lx.distributed.initialize) but torch.distributed is "
            "not initialised; DCP coordinates its plans through it: call "
            "torch.distributed.init_process_group('gloo', ...) in every process first")


@contextlib.contextmanager
def _plain_errors():
    """DCP wraps every failure in a `CheckpointException` (a BaseException, which
    `except Exception` misses); when one process failed, raise its own error."""
    try:
        yield
    except CheckpointException as e:
        if len(e.failures) == 1:
            error = next(iter(e.failures.values()))[0]
            raise error from e
        raise


def save(state_dict: dict, checkpoint_id, *, storage_writer: Optional[dcp.StorageWriter] = None,
         process_group=None) -> None:
    """`dcp.save(state_dict, checkpoint_id=..., planner=SavePlanner())`: every process
    writes its own shards into the folder `checkpoint_id`."""
    _check_processes()
    with _plain_errors():
        dcp.save(state_dict, checkpoint_id=checkpoint_id, storage_writer=storage_writer, planner=SavePlanner(),
                 process_group=process_group)


def load(state_dict: dict, checkpoint_id, *, storage_reader: Optional[dcp.StorageReader] = None,
         process_group=None) -> None:
    """`dcp.load(state_dict, checkpoint_id=..., planner=LoadPlanner())`: fills the tensors
    of `state_dict` in place, each keeping its sharding. Non-tensor entries (an
    optimizer's hyperparameters) are replaced in `state_dict` itself: pass it to
    `optimizer.load_state_dict` afterwards."""
    _check_processes()
    with _plain_errors():
        dcp.load(state_dict, checkpoint_id=checkpoint_id, storage_reader=storage_reader, planner=LoadPlanner(),
                 process_group=process_group)


def prime_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Create `optimizer`'s state so that a checkpoint can be loaded into it (AdamW's
    moments exist only after a first step): one step with zero gradients, after which
    the parameters get their values back and the gradients are cleared. Returns it."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    with torch.no_grad():
        kept = [p.detach().clone() for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        for p, value in zip(params, kept):
            p.copy_(value)
            p.grad = None
    return optimizer
