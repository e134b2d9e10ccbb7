"""`torch.lazyxla`: the device module PyTorch looks up for the renamed PrivateUse1 backend.

It answers what torch's generic device code asks of a device module by name: autocast's
supported dtypes, seeding and RNG state, `is_available` / `current_device` /
`device_count`, streams (one implicit stream per device: JAX orders the work it runs),
and torch.cuda-style memory figures from the runtime's ledger of live device buffers
(runtime/memory.py), which torch.accelerator's functions also reach
(frontend/accelerator.py).

Design: docs/design.md, "frontend/device_module.py".
"""
from __future__ import annotations

import contextlib

import torch

from ..runtime import memory
from ..runtime.execute import wait_all
from ..runtime import backend
from .device import device_index, lazyxla_devices

# Both lower-precision float types lower to XLA on every platform (bfloat16 natively
# on TPU/GPU; CPU XLA computes them via float32 and rounds).
_AMP_DTYPES = (torch.bfloat16, torch.float16)


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    # JAX's runtime lives in this process; nothing is inherited across fork that
    # torch's seeding could break.
    return False


def device_count() -> int:
    return len(lazyxla_devices())


def current_device() -> int:
    # lazyxla has no "current device" state: device=None and "lazyxla" mean index 0.
    return 0


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes `torch.autocast("lazyxla", dtype=...)` accepts; torch warns and
    disables autocast for any other, as it does for CPU and CUDA."""
    return list(_AMP_DTYPES)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def manual_seed(seed: int) -> None:
    """Nothing to seed: lazyxla's random ops draw their seeds from PyTorch's default
    CPU generator (frontend/handlers.py `draw_seed`), which torch.manual_seed sets."""


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def get_rng_state(device=None) -> torch.Tensor:
    """The lazyxla generator's state is the default CPU generator's (see manual_seed):
    `torch.random.fork_rng(device_type="lazyxla")` and torch's freeze_rng_state save it
    through this and restore it through set_rng_state."""
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    torch.set_rng_state(new_state)


def memory_device(device=None) -> int:
    """Local index of `device`: None (device 0), an int, "lazyxla:1" or a torch.device."""
    if isinstance(device, int) and not isinstance(device, bool):
        if not 0 <= device < len(lazyxla_devices()):
            raise ValueError(f"lazyxla: device {device} does not exist; there are {len(lazyxla_devices())}")
        return device
    return device_index(device)


def memory_allocated(device=None) -> int:
    """Bytes of live device buffers held by lazyxla tensors on `device`."""
    return memory.allocated(memory_device(device))


def max_memory_allocated(device=None) -> int:
    """Peak of `memory_allocated` since start or `reset_peak_memory_stats`, including
    what executing graphs needed on top (outputs, temporaries)."""
    return memory.peak(memory_device(device))


def reset_peak_memory_stats(device=None) -> None:
    memory.reset_peak(memory_device(device))


def memory_stats(device=None) -> dict:
    """torch.cuda.memory_stats' names for the ledger's counters, plus `bytes_limit`;
    `reserved_bytes` is what the device's allocator holds where it says: its pool on a GPU,
    the bytes in use on a TPU (which keeps no cache of free blocks; its `bytes_reserved` is
    the runtime's own share, not the pool), never below the live bytes."""
    index = memory_device(device)
    stats = memory.stats(index)
    backend = memory.backend_stats(index) or {}
    pooled = "pool_bytes" in backend
    held, peak = ("pool_bytes", "peak_pool_bytes") if pooled else ("bytes_in_use", "peak_bytes_in_use")
    reserved = max(int(backend.get(held, 0)), stats["allocated_bytes.all.current"])
    stats["reserved_bytes.all.current"] = reserved
    stats["reserved_bytes.all.peak"] = max(reserved, int(backend.get(peak, 0)))
    return stats


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_accumulated_memory_stats(device=None) -> None:
    memory.reset_accumulated(memory_device(device))


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes, as torch.cuda.mem_get_info: the device's capacity less what
    its allocator uses (GPU, TPU) or lazyxla's live buffers (CPU)."""
    index = memory_device(device)
    total = memory.bytes_limit(index)
    backend = memory.backend_stats(index) or {}
    used = int(backend.get("bytes_in_use", memory.allocated(index)))
    return max(total - used, 0), total


def empty_cache() -> None:
    """Let finished executions release their buffers and hand freed host heap back to the
    OS. JAX's device allocators keep their pools: nothing in JAX empties them."""
    wait_all()
    backend.current().release_host_memory()


class Stream:
    """The one implicit stream of the lazyxla devices: `synchronize` waits for the
    work scheduled so far; there is nothing to order between streams."""

    device_type = "lazyxla"

    def synchronize(self) -> None:
        wait_all()

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def query(self) -> bool:
        return True


_STREAM = Stream()


def current_stream(device=None) -> Stream:
    return _STREAM


def stream(s: Stream) -> "contextlib.AbstractContextManager":
    """`with torch.lazyxla.stream(s):` changes nothing (one stream)."""
    return contextlib.nullcontext()


def synchronize(device=None) -> None:
    """Wait for the executions scheduled so far. Pending lazy work is not run: a step
    barrier (`lx.sync()`, `optimizer.step()`) does that."""
    _STREAM.synchronize()
