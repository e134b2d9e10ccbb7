"""Stands in for torch's `torch/_dynamo/backends/torchxla.py` while the layer is installed.

torch ships the dynamo backends `"openxla"` and `"openxla_eval"` in that module, which
dynamo imports the first time it lists its backends (any unknown name, and the end of
every compile); they call a real torch_xla's bridge (`torch_xla.core.dynamo_bridge`).
The compat finder answers that module name with this module, which registers both
names as lazyxla's backend with `execute_at_call=True`: each compiled graph runs when
it is called, as PyTorch/XLA's bridge runs it (lazyxla/dynamo/backend.py).

Options weighed: registering "openxla" when dynamo is imported (torch's module then
fails on a duplicate name when dynamo lists its backends), or importing torch's
module first and replacing its entries (its import pulls AOTAutograd and inductor,
which re-enters torch packages still initialising when dynamo's import was set off
by one of them).
"""
from __future__ import annotations

import functools

from torch._dynamo.backends.registry import _COMPILER_FNS, lookup_backend, register_backend

NAMES = ("openxla", "openxla_eval")
openxla = functools.partial(lookup_backend("lazyxla"), options={"execute_at_call": True})

for _name in NAMES:
    # torch's own entries exist if its module was imported before install(): replace them.
    _COMPILER_FNS.pop(_name, None)
    register_backend(name=_name)(openxla)
