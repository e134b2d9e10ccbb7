"""`torch_xla.debug.model_comparator` (mc): save named intermediate tensors of two runs
(say, CPU and device) into two folders and report where they differ.

`configure(save_dir)` (or the `MODELCMP_SAVEDIR` variable) turns saving on;
`save(name, tensor, step=None)` writes a CPU copy of `tensor` (on the master ordinal)
as `<save_dir>[/step-<step>]/<name>.<k>`, `k` counting the saves of that name (a
`None` name is the caller's `file.l<line>`), and returns `tensor`;
`compare(dir1, dir2, rtol, atol, max_diffs)` returns a report, empty when every saved
tensor matches: missing files and, per differing tensor, its largest differences
(`|a - b| > max(rtol * max(|a|, |b|), atol)`). Upstream's file layout and report.
"""
from __future__ import annotations

import os
import re
import traceback
from typing import Dict, Optional, Set

import torch

from ...unsupported import unsupported_names

_state: Dict[str, object] = {"dir": None, "ids": {}, "step": None}


def configure(save_dir: Optional[str]) -> None:
    _state.update({"dir": save_dir, "ids": {}, "step": None})


def _save_dir() -> Optional[str]:
    return _state["dir"] if _state["dir"] is not None else os.environ.get("MODELCMP_SAVEDIR")


def _caller_name() -> str:
    here = os.path.basename(__file__)
    for frame in traceback.extract_stack(limit=8):
        if os.path.basename(frame.filename) != here:
            return f"{os.path.basename(frame.filename)}.l{frame.lineno}"
    return "noname"


def save(name: Optional[str], tensor: torch.Tensor, step: Optional[int] = None) -> torch.Tensor:
    save_dir = _save_dir()
    if save_dir is None:
        return tensor
    from ..runtime import global_ordinal
    host = tensor.cpu()
    if global_ordinal() != 0:
        return tensor
    name = name if name is not None else _caller_name()
    path = save_dir
    if step is not None:
        path = os.path.join(save_dir, f"step-{step}")
        os.makedirs(path, exist_ok=True)
        if step != _state["step"]:
            _state.update({"step": step, "ids": {}})
    ids: Dict[str, int] = _state["ids"]   # type: ignore[assignment]
    k = ids.get(name, 0)
    ids[name] = k + 1
    torch.save(host, os.path.join(path, f"{name}.{k}"))
    return tensor


def _index_of(sizes: list, flat: int) -> list:
    index = []
    for size in reversed(sizes):
        index.append(flat % size)
        flat //= size
    return list(reversed(index))


def compare_tensors(tensor1: torch.Tensor, tensor2: torch.Tensor, rtol: float = 1e-05, atol: float = 1e-08,
                    max_diffs: int = 25) -> str:
    """The largest differences of two tensors of one shape, one line each; '' if none."""
    sizes1, sizes2 = list(tensor1.shape), list(tensor2.shape)
    if sizes1 != sizes2:
        return f"Tensors have different shape: {sizes1} vs. {sizes2}\n"
    a, b = tensor1.double().flatten(), tensor2.double().flatten()
    error = (a - b).abs()
    bad = torch.nonzero(error > torch.clamp(torch.maximum(a.abs(), b.abs()) * rtol, min=atol)).flatten()
    worst = bad[torch.argsort(error[bad], descending=True, stable=True)][:max_diffs].tolist()
    report = "".join(f"{_index_of(sizes1, i)}: {a[i].item()} vs. {b[i].item()}\terror={error[i].item()}\n"
                     for i in worst)
    if bad.numel() > max_diffs:
        report += f"... aborting after {max_diffs} differences\n"
    return report


def _saved_files(path: str) -> Set[str]:
    return {os.path.relpath(os.path.join(root, f), path) for root, _, files in os.walk(path)
            for f in files if re.match(r".*\.\d+$", f)}


def tensor_file_compare(path1: str, path2: str, rtol: float = 1e-05, atol: float = 1e-08,
                        max_diffs: int = 25) -> str:
    report = compare_tensors(torch.load(path1), torch.load(path2), rtol=rtol, atol=atol, max_diffs=max_diffs)
    if not report:
        return ""
    name, k = re.match(r"(.*)\.(\d+)$", os.path.basename(path1)).groups()
    step = re.match(r"step-(\d+)$", os.path.basename(os.path.dirname(path1)))
    head = f'Changes in saved tensor "{name}" with id={k}' + (f" at step={step.group(1)}" if step else "")
    return head + "\n" + "".join(f"  {line}\n" for line in report.split("\n"))


def compare(save_dir1: str, save_dir2: str, rtol: float = 1e-05, atol: float = 1e-08, max_diffs: int = 25) -> str:
    files1, files2 = _saved_files(save_dir1), _saved_files(save_dir2)
    report = "".join(f"Mismatch: {f} not in {save_dir2}\n" for f in sorted(files1 - files2))
    for f in sorted(files1 & files2):
        report += tensor_file_compare(os.path.join(save_dir1, f), os.path.join(save_dir2, f),
                                      rtol=rtol, atol=atol, max_diffs=max_diffs)
    return report + "".join(f"Mismatch: {f} not in {save_dir1}\n" for f in sorted(files2 - files1))


__getattr__ = unsupported_names(__name__)
