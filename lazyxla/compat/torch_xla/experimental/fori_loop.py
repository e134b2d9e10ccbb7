"""`torch_xla.experimental.fori_loop`: lx.experimental's `fori_loop` and `while_loop`.

Importing it is what upstream code does to make torch's own
`torch._higher_order_ops.while_loop.while_loop` run on the device; lazyxla's rule
for that operator is registered by lazyxla itself (experimental/while_loop.py),
so here the import only has to work.

Upstream's return conventions are kept: `fori_loop` returns a list
`[remaining count, *values]` (the count ends at 0), and `while_loop` the final
carried values. Differences: a loop over values that require grad raises
`lx.experimental.WhileLoopError` (upstream builds a loop without a backward);
`body_fun` may return a tuple when several values are carried.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from lazyxla.experimental import while_loop as _while_loop
from lazyxla.experimental.while_loop import count_down

from ...unsupported import unsupported_names


def fori_loop(lower: torch.Tensor, upper: torch.Tensor, body_fun: Callable, *input_value: torch.Tensor) -> list:
    return list(count_down(lower, upper, body_fun, input_value))


def while_loop(cond_fn: Callable, body_fn: Callable, carried_inputs: Sequence[torch.Tensor],
               additional_inputs: Optional[Sequence[torch.Tensor]] = None) -> tuple:
    return _while_loop(cond_fn, body_fn, carried_inputs, tuple(additional_inputs or ()))


__getattr__ = unsupported_names(__name__)
