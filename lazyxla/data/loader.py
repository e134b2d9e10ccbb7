"""`lx.data.DeviceLoader`: a host data loader's batches on a lazyxla device, uploaded
in the background while the step runs (docs/data.md).

The loader is the one place where a training loop's input crosses to the device,
so it does two jobs: it moves each batch (every CPU tensor in it, placed with the
`sharding` asked for in SPMD mode), and it keeps pending work bounded for loops that
write no barrier, with a step barrier before every `barrier_every`-th fetch and one at
the end (PyTorch/XLA's `MpDeviceLoader` does the same, so its loops step alike).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Hashable, Iterable, Iterator, Optional, Union

import torch

from ..frontend.device import DEVICE_TYPE, device_index
from ..frontend.uploads import Staged, adopt, stage
from ..spmd.api import is_spmd
from ..spmd.input_spec import ShardingSpec
from ..sync.api import sync
from .batches import map_leaves
from .pipeline import Pipeline

Sharding = Union[None, ShardingSpec, Mapping]


def _is_host_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu"


def _is_staged(x: Any) -> bool:
    return isinstance(x, Staged)


class DeviceLoader:
    """Iterates `loader` with every batch on `device` (default `lx.device()`).

    `prefetch`: batches uploaded ahead of the one the step uses, by background
    threads; 0 uploads each batch in the iterating thread when it is asked for.
    `host_prefetch`: host batches read ahead of the uploads (default `prefetch`).
    `transfer_threads`: threads uploading at once (order is kept whatever their number).
    `sharding` (SPMD mode): an `lx.spmd.ShardingSpec` for every batch tensor of its
    rank (others are replicated), or a dict of them by the batch's top-level keys (every
    key of a dict batch must be present). `barrier_every`: a step barrier (`lx.sync()`)
    before every `barrier_every`-th fetch and at the end; None for none. `barrier`: the
    barrier to run there (default `lx.sync`; lazyxla.compat's also runs step closures).
    """

    def __init__(self, loader: Iterable, device=None, *, prefetch: int = 2, host_prefetch: Optional[int] = None,
                 transfer_threads: int = 1, sharding: Sharding = None, barrier_every: Optional[int] = 1,
                 barrier: Callable[[], None] = sync) -> None:
        for name, value, least in (("prefetch", prefetch, 0), ("transfer_threads", transfer_threads, 1),
                                   ("host_prefetch", 1 if host_prefetch is None else host_prefetch, 1),
                                   ("barrier_every", 1 if barrier_every is None else barrier_every, 1)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"lazyxla: DeviceLoader's {name} must be an int >= {least}, got {value!r}")
        _check_sharding(sharding)
        self.loader = loader
        self.device = torch.device(DEVICE_TYPE, device_index(device))
        self.prefetch = prefetch
        self.host_prefetch = host_prefetch if host_prefetch is not None else max(prefetch, 1)
        self.transfer_threads = transfer_threads
        self.sharding = sharding
        self.barrier_every = barrier_every
        self.barrier = barrier

    def __iter__(self) -> "DeviceIterator":
        return DeviceIterator(self)

    def __len__(self) -> int:
        return len(self.loader)   # type: ignore[arg-type]

    def upload(self, batch: Any) -> Any:
        """`batch` with its CPU tensors on the device (what every iteration yields)."""
        return adopt_batch(self.stage(batch))

    def stage(self, batch: Any) -> Any:
        """`batch` with its CPU tensors copied to the device but not lazy tensors yet
        (frontend/uploads.py): the half of `upload` that background threads run."""
        specs = self.sharding
        if isinstance(specs, Mapping):
            if not isinstance(batch, Mapping):
                raise ValueError(f"lazyxla: DeviceLoader's sharding is a dict of specs, so every batch must be a "
                                 f"mapping; got a {type(batch).__name__}")
            missing = [k for k in batch if k not in specs]
            if missing:
                raise KeyError(f"lazyxla: the batch keys {missing} have no entry in DeviceLoader's sharding "
                               f"(it has {list(specs)}); add one for each (a spec, or None for replicated)")
        index = self.device.index or 0

        def convert(t: torch.Tensor, key: Optional[Hashable]) -> Staged:
            spec = specs.get(key) if isinstance(specs, Mapping) else specs
            if spec is None or not spec.can_apply(t):
                return stage(t, index)
            return stage(t, index, spec.sharding_for(t), process_local=spec.minibatch)

        with torch.no_grad():
            return map_leaves(batch, convert, _is_host_tensor)


def adopt_batch(staged: Any) -> Any:
    """A staged batch with every upload made a lazy tensor (in the taking thread)."""
    return map_leaves(staged, lambda s, key: adopt(s), _is_staged)


def _check_sharding(sharding: Sharding) -> None:
    specs = sharding.values() if isinstance(sharding, Mapping) else [sharding]
    for spec in specs:
        if spec is not None and not isinstance(spec, ShardingSpec):
            raise TypeError(f"lazyxla: DeviceLoader's sharding takes lx.spmd.ShardingSpec objects (or a dict of "
                            f"them), got a {type(spec).__name__}")
    if any(s is not None for s in specs) and not is_spmd():
        raise RuntimeError("lazyxla: DeviceLoader(sharding=...) needs SPMD mode; call lx.spmd.use_spmd() "
                           "before creating any lazyxla tensor")


class DeviceIterator:
    """One pass over a DeviceLoader. `close()` (or dropping the iterator) stops its
    threads; exhausting it or an exception from the loader closes it too."""

    def __init__(self, owner: DeviceLoader) -> None:
        self._owner = owner
        self._batches: Iterator = iter(owner.loader)
        self._pipeline: Optional[Pipeline] = None
        if owner.prefetch:
            self._pipeline = Pipeline(self._batches, owner.stage, prefetch=owner.prefetch,
                                      host_prefetch=owner.host_prefetch, transfer_threads=owner.transfer_threads)
            self._batches = iter(())   # the fetch thread owns the host iterator now
        self._since_barrier = 0
        self._finished = False

    def __iter__(self) -> "DeviceIterator":
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        every = self._owner.barrier_every
        if every is not None:
            # PyTorch/XLA's PerDeviceLoader: the check comes before each fetch, the one
            # that finds the end included
            if self._since_barrier >= every - 1:
                self._since_barrier = 0
                self._owner.barrier()
            else:
                self._since_barrier += 1
        try:
            if self._pipeline is not None:
                return adopt_batch(self._pipeline.next())
            return self._owner.upload(next(self._batches))
        except StopIteration:
            self.close()
            if every is not None:
                self._owner.barrier()
            raise
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._finished = True
        self._batches = iter(())
        if self._pipeline is not None:
            self._pipeline.close()

    def __del__(self) -> None:
        pipeline = getattr(self, "_pipeline", None)
        if pipeline is not None:
            pipeline.close(timeout=None)   # never join from a finalizer (it may run in any thread)
