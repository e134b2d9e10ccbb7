"""`torch_xla`: devices, the step barrier, seeding (torch_xla/torch_xla.py upstream)."""
from __future__ import annotations

import contextlib
import importlib
import os
from typing import Callable, Iterator, List, Optional

import torch

import lazyxla as lx
from lazyxla import config

from ..unsupported import refuse, unsupported_names
from . import _XLAC, backends, runtime  # noqa: F401  (upstream's `torch_xla._XLAC`, `.backends`, `.runtime`)
from . import _closures, _device_names, _dtype_env, _preemption  # noqa: F401
from ._device_names import lazyxla_device, to_upstream

__version__ = f"2.9.0+lazyxla.{lx.__version__}"   # the PyTorch/XLA release whose API is mapped

# Upstream's switch for all donation, read once per process (SPEC §1.3); lazyxla's
# own LAZYXLA_ALIASING, when set too, wins.
if "XLA_ENABLE_PARAM_ALIASING" in os.environ and not config.is_set("aliasing"):
    lx.set_aliasing(os.environ["XLA_ENABLE_PARAM_ALIASING"].strip().lower() not in ("0", "false"))


# XLA_USE_BF16 / XLA_DOWNCAST_BF16 / XLA_USE_32BIT_LONG, read at the first tensor they govern.
_dtype_env.install()

# "xla" devices name lazyxla's wherever torch takes a device (_device_names.py).
_device_names.enable()
# Upstream counts every traced op (`xla::<op>`) and times its tracing (`LazyTracing`).
lx.metrics.set_op_records(True)


def device(index: Optional[int] = None) -> torch.device:
    """`torch.device("xla", index)` (default 0), as upstream: lazyxla's device `index`
    under upstream's name. Tensors on it report lazyxla's name (`lazyxla:N`)."""
    return to_upstream(lazyxla_device(0 if index is None else index))


def devices() -> List[torch.device]:
    lazyxla_device()
    return [to_upstream(d) for d in lx.devices()]


def device_count() -> int:
    lazyxla_device()
    return lx.device_count()


def real_devices() -> List[str]:
    """Upstream names the runtime devices ('CPU:0'); here: the JAX platform and index."""
    lazyxla_device()
    return [f"{lx.platform().upper()}:{i}" for i in range(lx.device_count())]


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    """Step barrier, `lx.sync`; `XLA_SYNC_WAIT` overrides `wait` when set, as upstream.
    Then runs the step closures (xm.add_step_closure). `reset_scope` has no lazyxla
    counterpart (IR scopes are a debugging aid of upstream's IR)."""
    env = os.environ.get("XLA_SYNC_WAIT")
    if env is not None:
        wait = env.strip().lower() not in ("", "0", "false", "no", "off")
    lx.sync(wait=wait)
    _closures.run()


@contextlib.contextmanager
def _synced_region() -> Iterator[None]:
    sync()
    try:
        yield
    finally:
        sync()


def compile(f: Optional[Callable] = None, full_graph: Optional[bool] = False, name: Optional[str] = None,
            max_different_graphs: Optional[int] = None, custom_compile_options: Optional[dict] = None):
    """A step barrier before and after `f` (or the `with` body), as upstream's lazy-tensor
    `torch_xla.compile`; `name` only labels upstream's debug output. The graph-count
    limits (`full_graph=True`, `max_different_graphs`) and XLA flag overrides are not mapped."""
    if full_graph:
        refuse("torch_xla.compile(full_graph=True)")
    if max_different_graphs is not None:
        refuse("torch_xla.compile(max_different_graphs=...)")
    if custom_compile_options:
        refuse("torch_xla.compile(custom_compile_options=...)")
    return _synced_region() if f is None else _synced_region()(f)


def step():
    """`with torch_xla.step():` is upstream's `torch_xla.compile()`: barriers around the body."""
    return compile()


def launch(fn: Callable, args: tuple = (), start_method: str = "spawn", debug_single_process: bool = False) -> None:
    """`fn(index, *args)` in one process per host device (xmp.spawn); under torchrun
    (`LOCAL_RANK` set by it), in this process with that index, as upstream."""
    import importlib
    xmp = importlib.import_module(__name__ + ".distributed.xla_multiprocessing")
    if "TORCHELASTIC_RUN_ID" in os.environ:
        fn(int(os.environ["LOCAL_RANK"]), *args)
    else:
        xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None, start_method=start_method)


def manual_seed(seed: int, device=None) -> None:
    """lazyxla's random ops draw their seeds from torch's default generator, so this is
    `torch.manual_seed(seed)`: it reseeds the CPU generator too (upstream seeds the
    device only)."""
    torch.manual_seed(seed)


# upstream's `torch_xla.xm` (its torch_xla.py imports xla_model as xm); last, since
# xla_model imports this package. Imported by its full name: `from .core import
# xla_model` would ask the package's unsupported-name hook first.
xm = importlib.import_module(f"{__name__}.core.xla_model")

__getattr__ = unsupported_names(__name__)
