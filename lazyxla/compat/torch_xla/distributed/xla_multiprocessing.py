"""`torch_xla.distributed.xla_multiprocessing` (xmp): `spawn`, upstream's one process per
device, here one process per host device, each a lazyxla process of its own.

One device: `fn(0, *args)` runs in this process, as upstream. Several: each process is
`python -m lazyxla.compat.torch_xla.distributed.xla_multiprocessing` with the layer
installed and one host device; it joins JAX's coordination service
(`lx.distributed.initialize`) and a gloo `torch.distributed` group (for
`xm.rendezvous` and the collectives of torch_xla/_collectives.py), loads the main script as `__mp_main__` (as `multiprocessing`'s spawn
does, so `fn` and its arguments unpickle by name) and calls `fn(rank, *args)`.
"""
from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Callable, Optional

import torch

from ...unsupported import refuse, unsupported_names

_HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


class MpModelWrapper:
    """Upstream's holder of a CPU model created once before `spawn(start_method="fork")`,
    moved to each process's device by `to(device)` (one process at a time) and returned.
    lazyxla's processes are started fresh (`python -m`), so each holds its own copy."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model
        self._lock = threading.Lock()

    def to(self, device) -> torch.nn.Module:
        with self._lock:
            self._model.to(device)
        return self._model


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn: Callable, args: tuple = (), nprocs: Optional[int] = None, join: bool = True,
          daemon: bool = False, start_method: str = "spawn") -> None:
    """Run `fn(index, *args)` once per host device (`nprocs`: None or that count, or 1),
    each in its own process; returns when all finished, raising if one failed."""
    from .. import device_count, runtime
    if runtime.is_spmd():
        refuse("torch_xla.distributed.xla_multiprocessing.spawn in SPMD mode",
               "SPMD runs one process per host: call the function directly")
    if not join:
        refuse("torch_xla.distributed.xla_multiprocessing.spawn(join=False)")
    count = device_count() if nprocs is None else nprocs
    if count != 1 and count != device_count():
        raise ValueError(f"xmp.spawn: nprocs={nprocs}: lazyxla runs 1 process or one per host device "
                         f"({device_count()}); set CPU_NUM_DEVICES for more host devices")
    if count == 1:
        fn(0, *args)
        return
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main is None:
        refuse("torch_xla.distributed.xla_multiprocessing.spawn from an interactive session",
               "run a script: the processes load its functions by name")
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump((pickle.dumps((fn, tuple(args))), list(sys.argv)), f)
        job = f.name
    try:
        _run_processes(count, os.path.abspath(main), job)
    finally:
        os.unlink(job)


def _run_processes(count: int, main: str, job: str) -> None:
    coordinator, store = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "CPU_NUM_DEVICES"}
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {_HOST_DEVICES_FLAG}=1".strip()
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    procs = []
    for rank in range(count):
        env_r = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(count),
                     LOCAL_WORLD_SIZE=str(count))
        procs.append(subprocess.Popen([sys.executable, "-m", __name__, main, job, coordinator, store], env=env_r))
    codes = [p.wait() for p in procs]
    failed = [(i, c) for i, c in enumerate(codes) if c != 0]
    if failed:
        raise RuntimeError(f"xmp.spawn: process(es) {failed} (index, exit code) failed; see their output above")


def _worker(main: str, job: str, coordinator: str, store: str) -> None:
    """One spawned process (module docstring)."""
    import runpy

    from lazyxla import compat
    compat.install(force=True)
    import torch.distributed as dist

    import lazyxla as lx
    rank, count = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    lx.distributed.initialize(coordinator, count, rank)
    dist.init_process_group("gloo", init_method=f"tcp://{store}", world_size=count, rank=rank)
    sys.path.insert(0, os.path.dirname(main))
    with open(job, "rb") as f:
        # bytes and strings only: `fn` unpickles by name from the main script, run below
        call, sys.argv = pickle.load(f)
    # The main script sees the parent's sys.argv, as multiprocessing's spawn children do
    # (scripts locate their files from sys.argv[0]).
    module = type(sys)("__mp_main__")
    module.__dict__.update(runpy.run_path(main, run_name="__mp_main__"))
    sys.modules["__mp_main__"] = sys.modules["__main__"] = module
    fn, args = pickle.loads(call)
    try:
        fn(rank, *args)
    finally:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker(*sys.argv[1:5])
else:
    __getattr__ = unsupported_names(__name__)
