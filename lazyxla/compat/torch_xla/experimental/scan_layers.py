"""`torch_xla.experimental.scan_layers`: lx.experimental.scan_layers.

`partition_fn` and `is_layer_pure` are accepted and not used (see
compat/torch_xla/experimental/scan.py). Layers that differ raise
`lx.experimental.ScanError` naming the first difference; it is also a
ValueError, as upstream raises."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch

from lazyxla.experimental import scan_layers as _scan_layers

from ...unsupported import unsupported_names

_ONE_LAYER_CACHE: dict = {}


def scan_layers(layers: Iterable[torch.nn.Module], input_data: Any, partition_fn: Optional[Callable] = None,
                is_layer_pure: bool = False) -> Any:
    return _scan_layers(list(layers), input_data)


__getattr__ = unsupported_names(__name__)
