"""`torch_xla.distributed.data_parallel` (dp): `DataParallel`, upstream's replication of
a network over the devices of one process, one thread per device.

lazyxla replicates by processes (`torch_xla.launch`, one per device) or as one SPMD
program, so `DataParallel` runs on one device: a copy of the network moved there and
`loop_fn(model, loader, device, context)` called in this thread, its batches from a
`ParallelLoader` (lx.data.DeviceLoader). Several devices raise UnsupportedError
saying what to use instead; no device (an empty `device_ids`) runs the network as
given, as upstream.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, List, Optional, Sequence, Union

import torch

from ...unsupported import refuse, unsupported_names
from ..core import xla_model as xm
from .parallel_loader import ParallelLoader


class Context:
    """Per-device state that lives as long as the DataParallel object."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def getattr_or(self, name: str, defval: Any) -> Any:
        """The attribute `name`, set first to `defval` (or `defval()` if callable) when missing or None."""
        value = getattr(self, name, None)
        if value is None:
            value = defval() if callable(defval) else defval
            setattr(self, name, value)
        return value


class DataParallel:
    """`network` (a module, or a callable making one) on `device_ids` (default: this
    process's devices); `self(loop_fn, loader)` runs one epoch and returns
    `[loop_fn's result]`."""

    def __init__(self, network: Union[torch.nn.Module, Callable[[], torch.nn.Module]],
                 device_ids: Optional[Sequence[Union[str, torch.device]]] = None, **kwargs: Any) -> None:
        if device_ids is None:
            device_ids = xm.get_xla_supported_devices()
        if len(device_ids) > 1:
            refuse(f"torch_xla.distributed.data_parallel.DataParallel over {len(device_ids)} devices of one process",
                   "lazyxla replicates over processes: torch_xla.launch(fn) runs one process per device "
                   "(xm.optimizer_step reduces the gradients), or use SPMD (xs.mark_sharding)")
        self._kwargs = kwargs
        module = network if isinstance(network, torch.nn.Module) else network()
        self._native_run = not device_ids
        if self._native_run:   # no device: the network as given, on its own device
            devices = {str(p.device) for p in module.parameters()}
            if len(devices) > 1:
                raise RuntimeError(f"Model uses more than one device: {sorted(devices)}")
            self._device_ids = [devices.pop() if devices else "cpu"]
            self._models = [module]
        else:
            self._device_ids = [str(d) for d in device_ids]
            self._models = [copy.deepcopy(module).to(device=torch.device(self._device_ids[0]))]
        self._contexts = [Context(torch.device(self._device_ids[0]))]

    @property
    def devices(self) -> List[str]:
        return self._device_ids

    @property
    def models(self) -> List[torch.nn.Module]:
        return self._models

    def __call__(self, loop_fn: Callable, loader: Iterable, batchdim: int = 0, **kwargs: Any) -> List[Any]:
        device = torch.device(self._device_ids[0])
        if self._native_run:
            return [loop_fn(self._models[0], enumerate(loader), device, self._contexts[0], self._kwargs)]
        xm.wait_device_ops()
        para_loader = ParallelLoader(loader, self._device_ids, batchdim=batchdim, **self._kwargs)
        result = loop_fn(self._models[0], para_loader.per_device_loader(device), device, self._contexts[0],
                         **kwargs)
        para_loader.close()
        return [result]


__getattr__ = unsupported_names(__name__)
