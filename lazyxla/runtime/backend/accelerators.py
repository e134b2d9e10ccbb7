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


class GpuBackend(_Accelerator):
    platform = "gpu"

    def attention_implementation(self, dtype) -> str:
        # cuDNN's flash attention takes bfloat16 and float16; lower/attention.py keeps XLA's
        # where cuDNN refuses a call (head size, GPU generation, cuDNN version)
        return "cudnn" if dtype in _CUDNN_DTYPES else "xla"
