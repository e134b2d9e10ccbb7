"""The CPU backend: device buffers are blocks of the process heap (host_heap.py)."""
from __future__ import annotations

from typing import Optional

from ... import config
from . import host_heap
from .base import Backend, _physical_memory

# XLA:CPU expands optimization barriers before CSE, which then merges an activation
# checkpoint's re-run back into the forward (lazyxla/recompute.py): graphs with a barrier keep
# it to the end. Only here: the TPU's compiler has no code for a barrier that reaches its
# emitter and refused every such graph ("HLO opt-barrier is not implemented on TPU", issue 45;
# reproduced with libtpu's compile-only client, scripts/tpu/aot_compile.py); its pipeline
# expands barriers itself.
_KEEP_BARRIERS = {"xla_disable_hlo_passes": "cse_barrier_expander"}


class CpuBackend(Backend):
    platform = "cpu"
    # a Python number passed to a CPU executable costs no transfer: one operand each keeps
    # the program free of pack reads
    pack_scalars = False

    @staticmethod
    def prepare_at_import() -> None:
        """Before JAX's backend starts threads: one heap that keeps device buffers."""
        host_heap.tune_at_import(config.SETTINGS.heap_tuning)

    def start(self) -> None:
        super().start()
        host_heap.tune(config.SETTINGS.heap_tuning)
        # fixed from here on, so a token of the process: graphs compiled with split
        # temporaries never meet those compiled without in the cache
        self.compile_token = tuple(sorted(host_heap.compiler_options(config.SETTINGS.split_temporaries).items()))

    def compiler_options(self, has_barriers: bool) -> dict:
        options = dict(_KEEP_BARRIERS) if has_barriers else {}
        options.update(self.compile_token)
        return options

    def after_barrier(self, young: int) -> None:
        super().after_barrier(young)
        host_heap.after_step()

    def memory_limit(self, device: int) -> int:
        return _physical_memory()   # XLA:CPU buffers are host heap

    def memory_stats(self, device: int) -> Optional[dict]:
        return None
