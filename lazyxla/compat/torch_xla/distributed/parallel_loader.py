"""`torch_xla.distributed.parallel_loader` (pl): `MpDeviceLoader` for one device.

Upstream uploads batches from background threads and runs `torch_xla.sync()` every
`batches_per_execution` batches (before fetching the next one) and at the end, so
loops over it need no `mark_step` of their own. Here the upload is synchronous (`.to(device)` of a CPU
tensor returns device data at once; a thread would only add a copy of the batch)
and the syncs happen at the same points, so such loops step the same way.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch

from ...unsupported import refuse, unsupported_names
from .. import sync


def _to_device(batch: Any, device: torch.device) -> Any:
    """Tensors anywhere in tuples, lists and dicts moved to `device`, as upstream's
    `xm.send_cpu_data_to_device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return type(batch)((k, _to_device(v, device)) for k, v in batch.items())
    if isinstance(batch, (list, tuple)):
        moved = [_to_device(v, device) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


class MpDeviceLoader:
    """Iterates `loader` with every batch on `device`, running step barriers where
    upstream's loader does (module docstring)."""

    def __init__(self, loader: Iterable, device, batches_per_execution: int = 1, input_sharding=None,
                 **ignored_prefetch_options: Any) -> None:
        if input_sharding is not None:
            refuse("torch_xla.distributed.parallel_loader.MpDeviceLoader(input_sharding=...)",
                   "Shard the batch with xs.mark_sharding after loading it")
        if batches_per_execution < 1:
            raise ValueError(f"batches_per_execution must be >= 1, got {batches_per_execution}")
        self._loader = loader
        self._device = torch.device(device)
        self._per_execution = batches_per_execution

    def __iter__(self) -> Iterator[Any]:
        # Upstream's PerDeviceLoader.next: the barrier check comes before each fetch,
        # the one that finds the end included, and the end adds one more barrier.
        batches = iter(self._loader)
        since_sync = 0
        while True:
            if since_sync >= self._per_execution - 1:
                since_sync = 0
                sync()
            else:
                since_sync += 1
            try:
                batch = next(batches)
            except StopIteration:
                sync()
                return
            yield _to_device(batch, self._device)

    def __len__(self) -> int:
        return len(self._loader)


__getattr__ = unsupported_names(__name__)
