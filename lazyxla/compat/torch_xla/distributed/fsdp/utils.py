"""`torch_xla.distributed.fsdp.utils`: `checkpoint_module`, `apply_xla_patch_to_nn_linear`
(distributed/_patched_linear.py)."""
from __future__ import annotations

import torch

import lazyxla as lx

from ....unsupported import unsupported_names
from .._patched_linear import apply_xla_patch_to_nn_linear  # noqa: F401


def checkpoint_module(module: torch.nn.Module) -> torch.nn.Module:
    """`module` (changed in place, and returned) with its forward run under activation
    checkpointing (lx.utils.checkpoint), as upstream: keyword arguments are passed
    through positionally, and a call where no input requires grad is not checkpointed
    (the reentrant checkpoint could not give its parameters gradients then)."""
    original = module.forward

    def forward(*args, **kwargs):
        packed = (*args, *kwargs.values())
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in packed):
            return original(*args, **kwargs)
        count, keys = len(args), tuple(kwargs)

        def unpacked(*values):
            return original(*values[:count], **dict(zip(keys, values[count:])))
        return lx.utils.checkpoint(unpacked, *packed)

    module.forward = forward
    return module


__getattr__ = unsupported_names(__name__)
