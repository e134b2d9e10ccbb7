"""To the fake-tensor converter and to AOTAutograd, a lazy tensor is a plain tensor.

`LazyTensor` is a traceable wrapper subclass with no inner tensors (frontend/
tensor.py says why). torch's compile stack treats such subclasses by
flattening them into their inner tensors, which for us is meaningless, and
worse, a subclass with no inner tensors passes "all inner tensors are fake"
checks vacuously: the fake-tensor converter and AOTAutograd would take a real
lazy tensor for an already-fake one. What torch.compile needs instead is what
it gets for a tensor of any other backend: a FakeTensor of the same shape,
strides and dtype on the `lazyxla` device, and at run time the real tensor.

So the subclass test `is_traceable_wrapper_subclass` answers False for lazy
tensors in exactly the modules that fakeify tensors or handle real tensors of
a compiled graph; dynamo's own variable builder keeps seeing
a traceable subclass, which is what makes it trace a lazy tensor as a tensor.
Each module is patched once, where it binds the name; the modules are the targets
of two patches in lazyxla/patches (with the torch releases verified, and undo). A
torch release that moves the check fails the patch's guard, naming it.

A third patch keeps dynamo's guards from checking a lazy tensor as a subclass: what its
flattening holds (dtype, device; no inner tensors) is checked by the plain tensor guard.
"""
from __future__ import annotations

from .. import patches
from ..frontend.tensor import LazyTensor


def _is_lazy(t: object) -> bool:
    return type(t) is LazyTensor


def treat_as_plain(patch: str) -> None:
    """Apply `patch` ("fake_tensor_subclass_test", "aot_autograd_subclass_test" or
    "dynamo_plain_tensor_guards")."""
    patches.apply(patch, _is_lazy)
