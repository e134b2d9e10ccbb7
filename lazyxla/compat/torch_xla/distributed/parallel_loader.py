"""`torch_xla.distributed.parallel_loader` (pl): `MpDeviceLoader` and `ParallelLoader`
on `lx.data.DeviceLoader`.

Upstream's options map one to one: `loader_prefetch_size` (host batches read ahead)
-> `host_prefetch`, `device_prefetch_size` (batches uploaded ahead) -> `prefetch`,
`host_to_device_transfer_threads` -> `transfer_threads`, `batches_per_execution` ->
`barrier_every` (a `torch_xla.sync()` before every such fetch and at the end, as
upstream), `input_sharding` (an `xs.ShardingSpec` or a dict of them by batch key) ->
`sharding`. `batchdim` is accepted and unused, as upstream. Where lazyxla does better:
batches keep their order with several transfer threads, tuples stay tuples, mappings
that are not dicts (`BatchEncoding`) are moved too, and an exception in the host loader
reaches the loop instead of ending it silently.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from lazyxla.data import DeviceIterator, DeviceLoader

from ...unsupported import refuse, unsupported_names
from .. import sync   # torch_xla.sync: the barrier, then the step closures (xm.add_step_closure)
from .._device_names import to_lazyxla

_DEFAULTS = dict(batchdim=0, batches_per_execution=1, loader_prefetch_size=16, device_prefetch_size=8,
                 host_to_device_transfer_threads=1, input_sharding=None)


def _device_loader(loader: Iterable, device, options: dict) -> DeviceLoader:
    unknown = sorted(set(options) - set(_DEFAULTS))
    if unknown:
        raise TypeError(f"ParallelLoader() got unexpected keyword arguments {unknown}")
    o = {**_DEFAULTS, **options}
    if o["batches_per_execution"] < 1:
        raise ValueError(f"batches_per_execution must be >= 1, got {o['batches_per_execution']}")
    return DeviceLoader(loader, to_lazyxla(device),
                        prefetch=o["device_prefetch_size"], host_prefetch=o["loader_prefetch_size"],
                        transfer_threads=o["host_to_device_transfer_threads"], sharding=o["input_sharding"],
                        barrier_every=o["batches_per_execution"], barrier=sync)


class ParallelLoader:
    """`ParallelLoader(cpu_loader, devices, **options)` for one device: upload threads
    start with `per_device_loader(device)`."""

    def __init__(self, cpu_loader: Iterable, devices, **options: Any) -> None:
        devices = [torch.device(d) for d in devices]
        if len(devices) != 1:
            refuse("torch_xla.distributed.parallel_loader.ParallelLoader over several devices",
                   "Run one process per device (each with its own loader), or one SPMD program")
        self._cpu_loader = cpu_loader
        self._device = devices[0]
        self._loader = _device_loader(cpu_loader, devices[0], options)
        self._iterators: list[DeviceIterator] = []

    def per_device_loader(self, device) -> DeviceIterator:
        if torch.device(device) != self._device:
            raise ValueError(f"ParallelLoader was made for {self._device}, not {device}")
        it = iter(self._loader)
        self._iterators.append(it)
        return it

    def per_device_samples(self) -> int:
        return len(self._cpu_loader)   # type: ignore[arg-type]

    def close(self) -> None:
        for it in self._iterators:
            it.close()
        self._iterators.clear()


class MpDeviceLoader:
    """`MpDeviceLoader(loader, device, **options)`: each `iter()` starts a fresh pass
    (closing the previous one) with the options as they are then: transformers sets
    `_parallel_loader_kwargs["input_sharding"]` after making the loader."""

    def __init__(self, loader: Iterable, device, **kwargs: Any) -> None:
        self._loader = loader
        self._device = device
        self._parallel_loader_kwargs = kwargs
        self._parallel_loader: ParallelLoader | None = None
        _device_loader(loader, device, kwargs)   # bad options fail here, as upstream's would at iter()

    def __iter__(self) -> DeviceIterator:
        if self._parallel_loader is not None:
            self._parallel_loader.close()
        self._parallel_loader = ParallelLoader(self._loader, [self._device], **self._parallel_loader_kwargs)
        return self._parallel_loader.per_device_loader(self._device)

    def __len__(self) -> int:
        return len(self._loader)   # type: ignore[arg-type]


__getattr__ = unsupported_names(__name__)
