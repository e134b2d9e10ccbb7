"""The input check the loop APIs (scan, while_loop) share."""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from ..frontend.tensor import LazyTensor


def require_lazy(error: type, api: str, groups: Iterable[tuple[str, Sequence]], advice: str) -> None:
    """Raise `error` naming the first leaf of a `(name, leaves)` group that is not a lazy
    tensor; `advice` ends the message."""
    for where, leaves in groups:
        for i, t in enumerate(leaves):
            if not isinstance(t, LazyTensor):
                kind = f"a {t.device} tensor" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
                raise error(f"{api}: every leaf of {where} must be a lazyxla tensor; leaf {i} is {kind}. "
                            f"{advice}")
