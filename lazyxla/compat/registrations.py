"""What `import torch_xla` registers with torch, mapped onto lazyxla:

* the dynamo backend names `"openxla"` and `"openxla_eval"`: lazyxla's backend with
  `execute_at_call=True` (dynamo_backends.py, which stands in for torch's module of
  these names: the finder maps `torch._dynamo.backends.torchxla` to it).
* `torch.ops.xla.dynamo_set_buffer_donor_(t, donate)`: the very op
  `torch.ops.lazyxla.set_buffer_donor_`, reachable under the upstream name, so
  dynamo puts lazyxla's op into its graphs and the backend treats it as its own.
"""
from __future__ import annotations

import importlib
import sys

import torch

STOCK_BACKENDS = "torch._dynamo.backends.torchxla"


def register() -> None:
    if STOCK_BACKENDS in sys.modules:
        # torch's module was imported already, so dynamo will not import it again:
        # register lazyxla's names over its entries now.
        importlib.import_module("lazyxla.compat.dynamo_backends")
    # torch.ops.xla is an op namespace object; the attribute shadows its op lookup.
    torch.ops.xla.dynamo_set_buffer_donor_ = torch.ops.lazyxla.set_buffer_donor_
