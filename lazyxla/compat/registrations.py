"""What `import torch_xla` registers with torch, mapped onto lazyxla:

* the dynamo backend name `"openxla"`: lazyxla's backend with
  `execute_at_call=True`, i.e. each compiled graph runs when it is called, as
  PyTorch/XLA's dynamo bridge runs it (lazyxla/dynamo/backend.py). Plain
  `backend="lazyxla"` fuses calls into the step graph instead.
* `torch.ops.xla.dynamo_set_buffer_donor_(t, donate)`: the very op
  `torch.ops.lazyxla.set_buffer_donor_`, reachable under the upstream name, so
  dynamo puts lazyxla's op into its graphs and the backend treats it as its own.
"""
from __future__ import annotations

import torch


def register() -> None:
    from ..dynamo import register_alias
    register_alias("openxla", execute_at_call=True)
    # torch.ops.xla is an op namespace object; the attribute shadows its op lookup.
    torch.ops.xla.dynamo_set_buffer_donor_ = torch.ops.lazyxla.set_buffer_donor_
