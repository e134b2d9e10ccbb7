"""`torch_xla.distributed.spmd` (xs): lx.spmd under upstream's names (docs/spmd.md,
docs/compat.md).

Upstream's `mark_sharding` returns an `XLAShardedTensor` wrapper; lazyxla's returns
the tensor itself, now sharded."""
from __future__ import annotations

from lazyxla.spmd import (Mesh, ShardingSpec, clear_sharding, get_1d_mesh, get_global_mesh,  # noqa: F401
                          mark_sharding, set_global_mesh)

from ...unsupported import unsupported_names
from ._patched_linear import xla_patched_nn_linear_forward  # noqa: F401  (einsum forward and backward)

__getattr__ = unsupported_names(__name__)
