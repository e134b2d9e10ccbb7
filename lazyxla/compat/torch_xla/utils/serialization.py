"""`torch_xla.utils.serialization` (xser): upstream's layout of saved data, one file per
tensor, so that large state dicts are written and read a tensor at a time.

`save(data, path)` writes `data` to `path` (torch.save) with every lazyxla tensor
replaced by a `TensorReference(i)`, and tensor `i`, copied to the CPU, to
`<path>.tensors/tensor_<i>.pt`. The tensors are read by one graph
(`xm._maybe_convert_to_cpu`: nothing donated). `load(path)` gives `data` back with CPU
tensors, as upstream (move them with `.to(device)`). The files are upstream's.
"""
from __future__ import annotations

import os
import shutil
from typing import Any

import torch

from ...unsupported import unsupported_names
from ..core import xla_model as xm


class TensorReference:
    """Stands for the tensor saved as `tensor_<tid>.pt` beside the data file."""

    def __init__(self, tid: int) -> None:
        self.tid = tid


TensorReference.__module__ = "torch_xla.utils.serialization"   # pickled under upstream's name, as its files are


def _tensors_folder(path: str) -> str:
    return path + ".tensors"


def _tensor_file(folder: str, tid: int) -> str:
    return os.path.join(folder, f"tensor_{tid}.pt")


def _is_saved_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) and xm.is_xla_tensor(value)


def save(data: Any, path: str, master_only: bool = True, global_master: bool = False) -> None:
    """`data` (any nesting of containers and objects) to `path` and its lazyxla tensors
    to `<path>.tensors/`, on the master ordinal only unless `master_only=False`
    (`global_master`: only the global master, else each host's)."""
    write = not master_only or xm.is_master_ordinal(local=not global_master)

    def convert(tensors: list) -> list:
        hosts = xm._maybe_convert_to_cpu(list(tensors))
        if write:
            for i, t in enumerate(hosts):
                torch.save(t, _tensor_file(_tensors_folder(path), i))
        return [TensorReference(i) for i in range(len(hosts))]

    if write:
        folder = _tensors_folder(path)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.mkdir(folder)
    refs = xm.ToXlaTensorArena(convert, _is_saved_tensor).transform(data)
    if write:
        torch.save(refs, path)


def load(path: str) -> Any:
    """The data `save(data, path)` wrote, its tensors on the CPU."""
    refs = torch.load(path, weights_only=False)
    folder = _tensors_folder(path)

    def convert(references: list) -> list:
        return [torch.load(_tensor_file(folder, r.tid)) for r in references]

    return xm.ToXlaTensorArena(convert, lambda v: isinstance(v, TensorReference)).transform(refs)


__all__ = ["save", "load", "TensorReference"]
__getattr__ = unsupported_names(__name__)
