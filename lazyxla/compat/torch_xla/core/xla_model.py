"""`torch_xla.core.xla_model` (xm): devices, the step barrier, the optimizer step,
saving, ordinals, collectives (one replica per process; between processes:
_collectives.py), host data moves and RateTracker (torch_xla/core/xla_model.py upstream)."""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import torch

import lazyxla as lx

from ... import torch_xla
from ...unsupported import refuse, unsupported_names
from .. import _closures, _collectives, runtime as xr
from ..utils import utils as xu
from ..utils.utils import getenv_as
from .._device_names import to_lazyxla


def xla_device(n: Optional[int] = None, devkind: Optional[str] = None) -> torch.device:
    """Deprecated upstream in favour of torch_xla.device(); the lazyxla device `n`."""
    if devkind is not None and devkind.upper() != xr.device_type():
        refuse(f"torch_xla.core.xla_model.xla_device(devkind={devkind!r})",
               f"lazyxla runs on the JAX platform {xr.device_type()}")
    return torch_xla.device(n)


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type in ("xla", lx.device().type)   # "xla" under the layer


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
    return _collectives.gather_objects("torch_xla.core.xla_model.rendezvous", payload)


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


def _fetch_gradients(optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
    """The `.grad` of every parameter of `optimizer` that has one, in parameter-group order."""
    return [p.grad for group in optimizer.param_groups for p in group["params"]
            if isinstance(p, torch.Tensor) and p.grad is not None]


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: Optional[List[List[int]]] = None,
                     pin_layout: bool = True) -> None:
    """With several replicas, each gradient becomes the mean over them (all_reduce); with
    one there is nothing to reduce."""
    count = xr.world_size()
    if count > 1:
        all_reduce(REDUCE_SUM, _fetch_gradients(optimizer), scale=1.0 / count, groups=groups,
                   pin_layout=pin_layout)


def optimizer_step(optimizer: torch.optim.Optimizer, barrier: bool = False,
                   optimizer_args: Dict = {}, groups: Optional[List[List[int]]] = None,
                   pin_layout: bool = True) -> Any:
    """reduce_gradients, `optimizer.step(**optimizer_args)`, then a step barrier if
    `barrier`, as upstream (with one replica, one process or SPMD, where the sharded
    graph reduces, nothing is reduced)."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**optimizer_args)
    if barrier:
        mark_step()
    return loss


# -- collectives (one replica per process; several processes: _collectives.py) -------

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX = "sum", "mul", "and", "or", "min", "max"


def _always_reduce() -> bool:
    # Upstream's switch that runs the one-replica all-reduce instead of skipping it.
    return getenv_as("XLA_ALWAYS_ALLREDUCE", bool, False)


def all_reduce(reduce_type: str, inputs: Union[torch.Tensor, List[torch.Tensor]], scale: float = 1.0,
               groups: Optional[List[List[int]]] = None,
               pin_layout: bool = True) -> Union[torch.Tensor, List[torch.Tensor]]:
    """The reduction of `inputs` over the replicas, times `scale`: a new tensor for one
    tensor, the list itself, updated in place, for a list. With one replica upstream
    skips the reduction, scale included (a copy of the tensor, the list untouched),
    unless XLA_ALWAYS_ALLREDUCE is set; then the one-replica reduction is the value
    times `scale`."""
    _collectives.check_reduce_type(reduce_type)
    single = isinstance(inputs, torch.Tensor)
    tensors = [inputs.clone()] if single else inputs
    if xr.world_size() > 1:
        _collectives.all_reduce_(reduce_type, tensors, scale, groups)
    elif _always_reduce() and scale != 1.0:
        with torch.no_grad():
            for t in tensors:
                t.mul_(scale)
    return tensors[0] if single else inputs


def all_gather(value: Union[torch.Tensor, List[torch.Tensor]], dim: int = 0,
               groups: Optional[List[List[int]]] = None, output: Optional[Any] = None,
               pin_layout: bool = True, channel_id=None, use_global_device_ids=None) -> Any:
    """The values of all replicas concatenated along `dim` (ordinal order); one replica:
    a copy. `output` (a tensor, or a list for a list of tensors) receives the result and
    is returned. A list of tensors needs `pin_layout=False`, as upstream."""
    if isinstance(value, torch.Tensor):
        dim = dim if dim >= 0 else value.dim() + dim
        result = _collectives.all_gather(value, dim, groups) if xr.world_size() > 1 else value.clone()
        if output is None:
            return result
        with torch.no_grad():
            output.copy_(result)
        return output
    if not (isinstance(value, list) and all(isinstance(v, torch.Tensor) for v in value)):
        raise TypeError(f"`value` needs to be a Tensor or a list of Tensors, but given {type(value)}.")
    if pin_layout:
        raise RuntimeError("For xm.all_gather with list of tensors input, pin_layout=True is not yet supported.")
    if output is not None and (not isinstance(output, list) or len(output) != len(value)):
        raise ValueError("`output` needs to be a list of Tensors as long as `value`")
    outs = output if output is not None else [None] * len(value)
    return [all_gather(v, dim, groups, o) for v, o in zip(value, outs)]


def collective_broadcast(tensors: List[torch.Tensor], root_ordinal: int = 0,
                         groups: Optional[List[int]] = None, pin_layout: bool = True) -> None:
    """In place: every replica's `tensors` take the values of replica `root_ordinal`'s."""
    if not 0 <= root_ordinal < xr.world_size():
        raise ValueError(f"torch_xla.core.xla_model.collective_broadcast: root_ordinal {root_ordinal} is "
                         f"not an ordinal of the {xr.world_size()} replica(s)")
    if xr.world_size() > 1:
        _collectives.broadcast_(tensors, root_ordinal, groups)


def broadcast_master_param(model: torch.nn.Module) -> None:
    """Every replica takes the parameters and buffers of the master (ordinal 0); then a
    step barrier, as upstream."""
    collective_broadcast(list(model.parameters()) + list(model.buffers()))
    mark_step()


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list], Any]) -> Any:
    """`reduce_fn` of the list of every process's `data` (lazyxla tensors in it copied to
    the CPU), in ordinal order; one process: `reduce_fn([data on the CPU])`. `tag`
    names the meeting only."""
    cpu_data = _maybe_convert_to_cpu(data)
    if xr.world_size() == 1:
        return reduce_fn([cpu_data])
    return reduce_fn(_collectives.gather_objects("torch_xla.core.xla_model.mesh_reduce", cpu_data))


def set_replication(device: Union[str, torch.device], devices: Optional[List[Union[str, torch.device]]]) -> None:
    """Upstream's replication setup for `device` among `devices` (accelerate calls it
    with the supported devices). lazyxla's replicas are its processes, so there is
    nothing to set up; `device` must be one of `devices`, as upstream checks."""
    names = [str(torch.device(d)) for d in devices or []]
    if names and str(torch.device(device)) not in names:
        raise ValueError(f"torch_xla.core.xla_model.set_replication: {device} is not in {names}")


# -- host data ----------------------------------------------------------------------

def _maybe_convert_to_cpu(data: Any, convert: bool = True) -> Any:
    """`data` with its lazyxla tensors (plain tensors, not Parameters, as upstream selects
    them) materialised by one graph and, if `convert`, replaced by CPU copies. Donates
    nothing."""
    lazies: list = []
    lx.utils.map_tensors(data, _is_plain_xla_tensor, lazies.append)
    if not convert:
        lx.sync_tensors(lazies, wait=True, donate_inplace=False)
        return data
    hosts = dict(zip(map(id, lazies), lx.utils.to_cpu(lazies)))
    return lx.utils.map_tensors(data, _is_plain_xla_tensor, lambda t: hosts[id(t)])


def _is_plain_xla_tensor(t: torch.Tensor) -> bool:
    return not isinstance(t, torch.nn.Parameter) and is_xla_tensor(t)


def send_cpu_data_to_device(datas: Any, device: Union[str, torch.device], input_sharding=None) -> Any:
    """`datas` with its CPU tensors (not Parameters) moved to `device` (a tensor alone
    comes back in a list, as upstream); containers keep their types (upstream turns
    tuples into lists)."""
    if input_sharding is not None:
        refuse("torch_xla.core.xla_model.send_cpu_data_to_device(input_sharding=...)",
               "Shard the tensors with xs.mark_sharding after moving them")
    device = to_lazyxla(device)
    if type(datas) is torch.Tensor:
        datas = [datas]
    if isinstance(datas, xu.DataWrapper):   # rebuilt from its tensors' device copies
        return datas.from_tensors(send_cpu_data_to_device(list(datas.get_tensors()), device))
    return lx.utils.map_tensors(datas, lambda t: type(t) is torch.Tensor and t.device.type == "cpu",
                                lambda t: t.to(device))


class ToXlaTensorArena:
    """Moves the tensors of nested data in one call: `transform(inputs)` collects each
    `x` with `select_fn(x)` (xu.for_each_instance), converts them all with
    `convert_fn(list)` and returns `inputs` rebuilt around the converted ones
    (xu.for_each_instance_rewrite: tuples become lists, as upstream)."""

    def __init__(self, convert_fn: Callable[[List[torch.Tensor]], List[torch.Tensor]],
                 select_fn: Callable[[torch.Tensor], bool]) -> None:
        self._convert_fn = convert_fn
        self._select_fn = select_fn

    def transform(self, inputs: Any) -> Any:
        found: List[torch.Tensor] = []
        xu.for_each_instance(inputs, self._select_fn, found.append)
        converted = iter(self._convert_fn(found) if found else [])
        return xu.for_each_instance_rewrite(inputs, self._select_fn, lambda _: next(converted))


class RateTracker:
    """Items per second, smoothed between calls of `rate()` (the weight of the previous
    rate: `smooth_factor`, else RATE_TRACKER_SMOOTHING, else 0.4), and `global_rate()`
    since creation, as upstream's."""

    def __init__(self, smooth_factor: Optional[float] = None) -> None:
        self._smooth_factor = (getenv_as("RATE_TRACKER_SMOOTHING", float, 0.4)
                               if smooth_factor is None else smooth_factor)
        self._start_time = self._partial_time = time.time()
        self._partial_count = self._count = 0.0
        self._partial_rate: Optional[float] = None

    def add(self, count: float) -> None:
        self._count += count

    def rate(self) -> float:
        """The rate since the previous call, blended with the previous rate."""
        now = time.time()
        delta = now - self._partial_time
        if delta <= 0:
            return 0.0
        current = self._count / delta
        rate = current if self._partial_rate is None else (
            (1 - self._smooth_factor) * current + self._smooth_factor * self._partial_rate)
        self._partial_count += self._count
        self._count = 0.0
        self._partial_time, self._partial_rate = now, rate
        return rate

    def global_rate(self) -> float:
        delta = time.time() - self._start_time
        return (self._partial_count + self._count) / delta if delta > 0 else 0.0


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
