"""`torch_xla.core.xla_model` (xm): devices, the step barrier, the optimizer step,
saving, ordinals (torch_xla/core/xla_model.py upstream)."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import torch

import lazyxla as lx

from ... import torch_xla
from ...unsupported import refuse, unsupported_names
from .. import _closures, runtime as xr
from .._device_names import to_lazyxla


def xla_device(n: Optional[int] = None, devkind: Optional[str] = None) -> torch.device:
    """Deprecated upstream in favour of torch_xla.device(); the lazyxla device `n`."""
    if devkind is not None and devkind.upper() != xr.device_type():
        refuse(f"torch_xla.core.xla_model.xla_device(devkind={devkind!r})",
               f"lazyxla runs on the JAX platform {xr.device_type()}")
    return torch_xla.device(n)


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == lx.device().type


def get_xla_supported_devices(devkind: Optional[str] = None, max_devices: Optional[int] = None) -> List[str]:
    names = [str(d) for d in torch_xla.devices()]
    return names[:max_devices] if max_devices is not None else names


def xla_device_hw(device: Union[str, torch.device]) -> str:
    """'CPU', 'CUDA' or 'TPU' (the platform behind every lazyxla device)."""
    torch.device(device)
    return xr.device_type()


def xla_real_devices(devices: Optional[List[torch.device]] = None) -> List[str]:
    real = torch_xla.real_devices()
    return real if devices is None else [real[torch.device(d).index or 0] for d in devices]


# -- ordinals and world size (one replica per process; see runtime.py) -------------

def get_ordinal(defval: int = 0) -> int:
    return xr.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    return xr.local_ordinal()


def world_size(defval: int = 1) -> int:
    return xr.world_size()


xrt_world_size = world_size   # the older name


def is_master_ordinal(local: bool = True) -> bool:
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(*args: Any, fd=None, **kwargs: Any) -> None:
    if is_master_ordinal(local=False):
        print(*args, file=fd, **kwargs)


def rendezvous(tag: str, payload: bytes = b"", replicas: List[int] = []) -> List[bytes]:
    """Wait for every process (torch_xla.launch / xmp.spawn) and exchange `payload`:
    the payloads of all processes in ordinal order, through torch.distributed's
    all_gather_object. One process: `[payload]`. `tag` names the meeting only."""
    if replicas and sorted(replicas) != list(range(xr.world_size())):
        refuse("torch_xla.core.xla_model.rendezvous(replicas=...) of a subset of the processes")
    if xr.world_size() == 1:
        return [payload]
    import torch.distributed as dist
    if not dist.is_initialized():
        refuse("torch_xla.core.xla_model.rendezvous without torch.distributed",
               "start the processes with torch_xla.launch or xmp.spawn, which initialise it")
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    return gathered


# -- steps --------------------------------------------------------------------------

def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    """Upstream's deprecated name of torch_xla.sync()."""
    torch_xla.sync(wait=wait, reset_scope=reset_scope)


def wait_device_ops(devices: Sequence[str] = ()) -> None:
    lx.wait_device_ops()


def add_step_closure(closure: Callable[..., Any], args: tuple = (), run_async: bool = False) -> None:
    """Runs `closure(*args)` after the next torch_xla.sync()/mark_step(), where the
    step's tensors hold values. `run_async` is accepted; closures run synchronously."""
    _closures.add(closure, args)


def optimizer_step(optimizer: torch.optim.Optimizer, barrier: bool = False,
                   optimizer_args: Dict = {}, groups: Optional[List[List[int]]] = None,
                   pin_layout: bool = True) -> Any:
    """`optimizer.step(**optimizer_args)`, then a step barrier if `barrier`. Upstream
    first all-reduces gradients across replicas: with one replica (one process, or SPMD,
    where the sharded graph reduces) there is nothing to reduce."""
    if xr.world_size() > 1:
        refuse("torch_xla.core.xla_model.optimizer_step with several replicas (gradient all-reduce)",
               "Use SPMD (torch_xla.runtime.use_spmd and xs.mark_sharding) for data parallelism")
    loss = optimizer.step(**optimizer_args)
    if barrier:
        mark_step()
    return loss


def optimization_barrier_(tensors: List[torch.Tensor]) -> None:
    lx.optimization_barrier_(tensors)


def unlazy(tensors: List[torch.Tensor]) -> None:
    """Materialise `tensors` now, donating nothing (upstream: _xla_sync_multi with
    sync_xla_data=False)."""
    lx.sync_tensors(list(tensors), wait=True, donate_inplace=False)


def save(data: Any, file_or_path, master_only: bool = True, global_master: bool = False) -> None:
    """lx.save on the master ordinal (every process when `master_only=False`): lazyxla
    tensors moved to the CPU, nothing donated."""
    if not master_only or is_master_ordinal(local=not global_master):
        lx.save(data, file_or_path)


# -- random state: lazyxla's random ops draw seeds from torch's default generator ----

def set_rng_state(seed: Union[int, torch.Tensor], device: Optional[str] = None) -> None:
    """An int: torch.manual_seed(seed), reseeding the CPU generator too (lazyxla draws
    device seeds from it), where upstream seeds the device only. A state from
    `get_rng_state()`: that generator state back."""
    if isinstance(seed, torch.Tensor):
        torch.random.set_rng_state(seed)
    else:
        torch_xla.manual_seed(seed)


def get_rng_state(device: Optional[str] = None) -> torch.Tensor:
    """The state lazyxla's random ops draw their seeds from: torch's default generator's
    (a uint8 tensor; upstream returns the device's int seed). `set_rng_state` takes it."""
    return torch.random.get_rng_state()


@contextlib.contextmanager
def fork_rng(device: Optional[str] = None, enabled: bool = True) -> Iterator[None]:
    """Random ops inside draw from the current state; on exit the state is what it was
    before (torch's default generator's, which lazyxla's random ops draw from)."""
    if not enabled:
        yield
        return
    state = get_rng_state(device)
    try:
        yield
    finally:
        set_rng_state(state, device)


def get_memory_info(device: Optional[torch.device] = None) -> Dict[str, int]:
    """lx.memory_info: `bytes_used`, `bytes_limit`, `peak_bytes_used` (ints)."""
    return lx.memory_info(to_lazyxla(device))

__getattr__ = unsupported_names(__name__)
