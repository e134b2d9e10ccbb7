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

import torch
from torch._dynamo.backends.registry import _COMPILER_FNS, lookup_backend, register_backend

from .torch_xla.debug.metrics import add_upstream_count

NAMES = ("openxla", "openxla_eval")
_DONOR_OPS = (torch.ops.lazyxla.set_buffer_donor_, torch.ops.lazyxla.set_buffer_donor_.default)


def openxla(gm: torch.fx.GraphModule, example_inputs):
    """lazyxla's backend, run at call. Upstream's bridge also runs each
    `dynamo_set_buffer_donor_` of the graph once on dynamo's fake tensors, which its
    `XlaSetBufferDonation` counts: so does `met.counter_value` (debug/metrics.py)."""
    donor_calls = sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in _DONOR_OPS)
    if donor_calls:
        add_upstream_count("XlaSetBufferDonation", donor_calls)
    return lookup_backend("lazyxla")(gm, example_inputs, options={"execute_at_call": True})

for _name in NAMES:
    # torch's own entries exist if its module was imported before install(): replace them.
    _COMPILER_FNS.pop(_name, None)
    register_backend(name=_name)(openxla)
