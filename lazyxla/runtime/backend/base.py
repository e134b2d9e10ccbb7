"""The backend interface, with what every platform shares as defaults.

A backend owns what differs per platform: the XLA options graphs compile with and the token
that keeps the compile cache right when they differ, what runs after a step barrier and
after a compile, the device's memory limit and figures, the attention implementation given
to lowering, and the host-overhead policies (how lifted scalars travel, the collector).
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

import jax
import torch

from .. import collector
from . import host_heap
from ..collector import CollectorPolicy


class Backend:
    """A platform's choices. Subclasses override what differs; the attributes are read on
    hot paths, so they are plain fields, fixed once the backend has started."""
    platform = ""
    # Lifted scalars in one vector per kind (one host-to-device transfer each) rather than
    # one operand apiece: on an accelerator each operand from the host is its own transfer.
    pack_scalars = True
    # Python's collector managed around step barriers (runtime/collector.py); None: left alone
    collector: Optional[CollectorPolicy] = CollectorPolicy()
    # what compiler_options adds for every graph, in every compile cache key (ir-independent)
    compile_token: tuple = ()
    # Where a small host read runs, in elements (LAZYXLA_HOST_READ_MAX_ELEMENTS and
    # LAZYXLA_HOST_BOOKKEEPING_MAX_ELEMENTS override; `setting`): a read's whole graph up to
    # this size, over scalars only, replayed by eager PyTorch on the host (sync/host_eval.py),
    # and integer bookkeeping up to this size beside a device graph (sync/host_split.py).
    # Neither ever takes a graph that reads a model's weights (more than scalars from the
    # device), so a decode step runs on the device on every platform; the values are the
    # CPU's, not yet measured per platform.
    host_read_max_elements = 4096
    # Graphs whose JAX program has at least this many equations compile as two halves at once
    # (compile/split.py; LAZYXLA_SPLIT_COMPILE_MIN_EQUATIONS overrides; `setting`); 0: never.
    # Off where a compile takes seconds, not minutes.
    split_compile_min_equations = 0
    host_bookkeeping_max_elements = 65536
    # The storage dtype policy while the user sets none (runtime/storage_dtypes.py): logical
    # dtype -> the dtype it is held and computed in on this platform. Empty: every dtype
    # as itself.
    storage_dtypes: Mapping[torch.dtype, torch.dtype] = {}

    def start(self) -> None:
        """At the first device use, once the platform is known (subclasses call it first):
        collections counted from here on (runtime/collector.py)."""
        collector.watch()

    def compiler_options(self, has_barriers: bool) -> dict:
        """XLA options for one graph; any option not implied by the graph's key must be
        covered by `compile_token`."""
        return {}

    def after_barrier(self, young: int) -> None:
        """At every step barrier, once its graphs ran (their pending IR freed); `young`: the
        collector's young count when the barrier began (runtime/collector.py)."""
        collector.after_barrier(self.collector, young)

    def after_compile(self) -> None:
        """After each compile (a compile's scratch is host memory on every platform)."""
        host_heap.release_free_heap()   # glibc's trim; a no-op elsewhere

    def release_host_memory(self) -> None:
        """`torch.lazyxla.empty_cache()`: hand freed host heap back to the OS."""
        host_heap.release_free_heap()

    def memory_limit(self, device: int) -> int:
        """Bytes local device `device` can hold: its allocator's limit."""
        stats = self.memory_stats(device) or {}
        limit = stats.get("bytes_limit")
        return int(limit) if limit else _physical_memory()

    def memory_stats(self, device: int) -> Optional[dict]:
        """What the device's allocator reports (bytes in use, peak, limit), None where nothing."""
        return jax.local_devices()[device].memory_stats() or None

    def attention_implementation(self, dtype) -> str:
        """`jax.nn.dot_product_attention`'s implementation for inputs of `dtype`."""
        return "xla"


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
