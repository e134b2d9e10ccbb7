"""`torch_xla.experimental.scan_layers`: lx.experimental.scan_layers.

`partition_fn` chooses saved activations or re-running as for `scan`
(compat/torch_xla/experimental/scan.py).
`is_layer_pure=True` keeps the one-layer function in `_ONE_LAYER_CACHE` under
`(id(partition_fn), id(layers[0]))`, as upstream does, and its traces in scan's
`_SCAN_COMPUTATION_CACHE`, so the layer is traced once across calls. Layers that differ raise
`lx.experimental.ScanError` naming the first difference; it is also a
ValueError, as upstream raises."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch

from lazyxla.experimental.scanned_layers import layer_function, scan_layers_with

from ...unsupported import unsupported_names
from .scan import _SCAN_COMPUTATION_CACHE, rematerializes

_ONE_LAYER_CACHE: dict = {}


def scan_layers(layers: Iterable[torch.nn.Module], input_data: Any, partition_fn: Optional[Callable] = None,
                is_layer_pure: bool = False) -> Any:
    layers = list(layers)
    remat = rematerializes(partition_fn)
    if not (is_layer_pure and layers):
        return scan_layers_with(layer_function(layers[0]) if layers else None, layers, (input_data,), None,
                                rematerialize=remat)
    key = (id(partition_fn), id(layers[0]))
    fn = _ONE_LAYER_CACHE.get(key) or _ONE_LAYER_CACHE.setdefault(key, layer_function(layers[0]))
    cache = _SCAN_COMPUTATION_CACHE.setdefault(fn, {})
    return scan_layers_with(fn, layers, (input_data,), cache, partition_fn, rematerialize=remat)


__getattr__ = unsupported_names(__name__)
