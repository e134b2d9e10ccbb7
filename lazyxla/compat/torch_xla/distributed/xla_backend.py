"""`torch_xla.distributed.xla_backend`: importing it registers torch.distributed's "xla"
backend name, as upstream's module does.

Upstream's `ProcessGroupXla` runs torch.distributed's collectives as XLA collectives in
the graph. lazyxla has none between processes outside SPMD (its cross-process
collectives are host copies through the gloo group that `xmp.spawn` starts,
torch_xla/_collectives.py), so `init_process_group("xla")` raises UnsupportedError
naming the alternatives, and `ProcessGroupXla` is not mapped (using it raises the same).
"""
from __future__ import annotations

import torch.distributed as dist

from ...unsupported import refuse, unsupported_names


def _create_xla_process_group(*args, **kwargs):
    refuse('torch.distributed.init_process_group(backend="xla") (torch_xla.distributed.xla_backend.'
           'ProcessGroupXla)',
           'Use backend="gloo" (lazyxla tensors go through it as host copies: torch_xla.launch / xmp.spawn '
           'set one up for xm.all_reduce and friends), or SPMD (torch_xla.runtime.use_spmd) for data '
           'parallelism in one process')


if "xla" not in dist.Backend.backend_list:
    dist.Backend.register_backend("xla", _create_xla_process_group, devices="xla")

__getattr__ = unsupported_names(__name__)
