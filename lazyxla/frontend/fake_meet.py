"""Where a lazy tensor meets one of torch.compile's fake tensors.

During dynamo's fake-tensor pass every tensor of the traced function is a
FakeTensor, except a constant the function makes from data on the lazyxla
device (`torch.tensor([...], device=x.device)`, `torch.as_tensor`,
`torch.from_numpy(a).to(x.device)`): fake mode builds such a constant for
real, as a lazy tensor, and keeps it beside its fake. When fake mode runs an op
on both kinds, torch asks each subclass in turn; a lazy tensor answering for a
call that also holds fakes must not trace the fake into a lazy graph (it has
no data), so it answers in fake mode's terms instead: its own operands become
fakes of the same mode (shape, strides and dtype are all fake mode needs) and
the op runs under that mode, which is exactly what fake mode would have done
had the constant been made on the CPU and moved.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten, tree_map_only


def _fake_mode(args: Any, kwargs: Any) -> Optional[Any]:
    leaves, _ = tree_flatten((args, kwargs))
    for leaf in leaves:
        if isinstance(leaf, FakeTensor):
            return leaf.fake_mode
    return None


def dispatch_with_foreign(func, lazy_type: type, args: tuple, kwargs: dict) -> Any:
    """Run `func` for a call that mixes lazy tensors with other tensor subclasses.

    Fake tensors of torch.compile: the op runs under their mode with the lazy
    operands converted. Any other subclass: NotImplemented, so torch asks it next
    (and raises its usual error if nobody handles the mix)."""
    mode = _fake_mode(args, kwargs)
    if mode is None:
        return NotImplemented

    def to_fake(t: torch.Tensor) -> torch.Tensor:
        return mode.from_tensor(t)

    args, kwargs = tree_map_only(lazy_type, to_fake, (args, kwargs))
    with mode:
        return func(*args, **kwargs)
