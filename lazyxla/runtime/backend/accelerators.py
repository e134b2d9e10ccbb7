"""The TPU and GPU backends: device memory is the chip's; the host heap is left to glibc."""
from __future__ import annotations

import torch

from . import host_heap
from .base import Backend

_CUDNN_DTYPES = (torch.bfloat16, torch.float16)


class _Accelerator(Backend):
    def start(self) -> None:
        super().start()
        host_heap.undo_import_tuning()   # the import may have tuned it before the platform was known


class TpuBackend(_Accelerator):
    platform = "tpu"
    # The TPU has no 64-bit arithmetic: XLA emulates it with 32-bit pairs, graphs with
    # float64 math (AdamW's bias corrections, lifted Python floats) compile for minutes, and
    # a complex128 graph can abort the process inside XLA's compile. 64-bit types (complex128:
    # two float64) are held and computed in 32 bits, as JAX does by default on TPUs
    # (docs/design.md, "64-bit types on the TPU"; LAZYXLA_STORAGE_DTYPES=none keeps them).
    storage_dtypes = {torch.float64: torch.float32, torch.int64: torch.int32, torch.uint64: torch.uint32,
                      torch.complex128: torch.complex64}
    # XLA:TPU compiles a module with few of the host's cores and a real model's step for a
    # minute or more; two halves compiled at once take about the larger one's time
    # (docs/design.md, "compile/split.py"). BERT-base's Trainer graphs have 3,820 and 8,413
    # equations, W2 at GPT-2 size 6,966; W2 reference (2,478) compiles in seconds, and its
    # steady step would pay the second executable call for nothing.
    split_compile_min_equations = 3000


class GpuBackend(_Accelerator):
    platform = "gpu"

    def attention_implementation(self, dtype) -> str:
        # cuDNN's flash attention takes bfloat16 and float16; lower/attention.py keeps XLA's
        # where cuDNN refuses a call (head size, GPU generation, cuDNN version)
        return "cudnn" if dtype in _CUDNN_DTYPES else "xla"
