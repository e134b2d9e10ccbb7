"""The frontend's setup, in one place: what `import lazyxla` installs into PyTorch.

Importing this module loads every frontend module that registers facts in the op
records (ir/ops.py): special handlers, decompositions, foreach targets, GradScaler's
ops. They are imported here and nowhere else for their registrations, as
`lower/registry.load_all` loads the lowering rules, so no module imports another
back at its bottom to make it register. `lazyxla/__init__.py` calls `install()` once,
after the lowering rules are loaded and before any op is dispatched (the router caches
each op's handler on its first call).
"""
from __future__ import annotations

from . import accelerator, autocast, kernels, optim, provenance
from . import decompositions, foreach, fused_optim, grad_scaler, handlers, histograms  # noqa: F401  (register)
from . import host_reads, indexing, mathbits  # noqa: F401  (register their ops' facts)
from .dispatch import dispatch
from .tensor import bind_dispatch


def install() -> None:
    """Register the lazyxla device with PyTorch and route its ops here (once per process)."""
    kernels.register_backend()
    bind_dispatch(dispatch)   # import-time seam: tensor.py's op dispatcher (dispatch.py imports tensor.py)
    provenance.follow_mode(dispatch)   # STATE's provenance mode (LAZYXLA_PROVENANCE at first) picks the dispatcher
    kernels.register_kernels()
    accelerator.install()      # torch.accelerator.* and Tensor.pin_memory() for the lazyxla device
    autocast.register()        # torch.autocast("lazyxla", ...) with PyTorch's op lists
    optim.enable_foreach_default()
    optim.track_optimizer_steps()
