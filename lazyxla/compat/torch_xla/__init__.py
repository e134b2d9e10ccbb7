"""`torch_xla`: devices, the step barrier, seeding (torch_xla/torch_xla.py upstream)."""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Callable, Iterator, List, Optional

import torch

import lazyxla as lx
from lazyxla import config

from ..distribution import VERSION
from ..unsupported import refuse, unsupported_names
from . import _XLAC, backends, runtime  # noqa: F401  (upstream's `torch_xla._XLAC`, `.backends`, `.runtime`)
from . import _closures, _device_names, _dtype_env, _patched_functions, _preemption  # noqa: F401
from ._device_names import lazyxla_device, to_upstream

__version__ = VERSION   # the version importlib.metadata reports (distribution.py)

# Upstream's switch for all donation, read once per process (SPEC §1.3); lazyxla's
# own LAZYXLA_ALIASING, when set too, wins.
if "XLA_ENABLE_PARAM_ALIASING" in os.environ and not config.is_set("aliasing"):
    lx.set_aliasing(os.environ["XLA_ENABLE_PARAM_ALIASING"].strip().lower() not in ("0", "false"))


# XLA_USE_BF16 / XLA_DOWNCAST_BF16 / XLA_USE_32BIT_LONG, read at the first tensor they govern.
_dtype_env.install()
# Upstream's matmul precision before any call: "default" (backends/__init__.py).
backends.install()

# "xla" devices name lazyxla's wherever torch takes a device (_device_names.py).
_device_names.enable()
# torch functions upstream replaces on import (clip_grad_norm_ of no gradients).
_patched_functions.install()
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
    Then runs the step closures (xm.add_step_closure). Inside a profiler `Trace`
    (torch_xla.debug.profiler) it raises RuntimeError, as upstream. `reset_scope` has
    no lazyxla counterpart (IR scopes are a debugging aid of upstream's IR)."""
    profiler = sys.modules.get(__name__ + ".debug.profiler")
    if profiler is not None:
        profiler.check_no_open_scope()
    env = os.environ.get("XLA_SYNC_WAIT")
    if env is not None:
        wait = env.strip().lower() not in ("", "0", "false", "no", "off")
    lx.sync(wait=wait)
    _closures.run()


def _graphs_run() -> int:
    # every graph lazyxla runs (step, partial sync, host read) is looked up in the cache once
    return sum(lx.metrics.counter_value(n) or 0 for n in ("CachedCompile", "UncachedCompile"))


@contextlib.contextmanager
def _compiled_region(full_graph: bool, name: Optional[str]) -> Iterator[None]:
    """Upstream's lazy-tensor compile: work pending before runs as a graph of its own, the
    body is traced lazily (eager mode off, and lazyxla's implied barrier at
    `optimizer.step()` off: the region is the step) and runs at the closing sync, also
    when the body raises. `full_graph`: the body must run nothing before that sync."""
    sync()
    implied = lx.implied_barriers_enabled()
    lx.set_implied_barriers(False)
    before = _graphs_run()
    try:
        with lx.experimental.eager_mode_context(False):
            yield
        ran = _graphs_run() - before
    finally:
        lx.set_implied_barriers(implied)
        sync()
    if full_graph and ran:
        raise RuntimeError(
            f"torch_xla.compile(full_graph=True): {name or 'the compiled region'} ran {ran} graph(s) before its "
            "end, so it does not trace to one graph (a host read such as .item(), .cpu() or print, or a sync "
            "inside it); upstream stops at the first such execution ('Unexpected execution happens inside the "
            "compiled function')")


def compile(f: Optional[Callable] = None, full_graph: Optional[bool] = False, name: Optional[str] = None,
            max_different_graphs: Optional[int] = None, custom_compile_options: Optional[dict] = None):
    """Decorator or context manager (`_compiled_region`): a step barrier before and after `f`
    (or the `with` body), eager mode off inside, as upstream's lazy-tensor `torch_xla.compile`;
    `full_graph=True` raises RuntimeError when the body ran a graph before its end. `name`
    (default: `f`'s name) labels the error only. The graph-count limit
    (`max_different_graphs`) and XLA flag overrides are not mapped."""
    if max_different_graphs is not None:
        refuse("torch_xla.compile(max_different_graphs=...)")
    if custom_compile_options:
        refuse("torch_xla.compile(custom_compile_options=...)")
    if name is None and f is not None:
        name = getattr(f, "__name__", None) or str(f)
    region = _compiled_region(bool(full_graph), name)
    return region if f is None else region(f)


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
