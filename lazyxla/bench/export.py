"""Hand the reference workloads' initial weights and batches to the JAX limit
as .npz files (the JAX child then needs neither torch nor lazyxla)."""
from __future__ import annotations

import os

import numpy as np

from .flops import model_flops_per_step


def export_workload(name: str, settings, out_dir: str, file_name: str = "") -> str:
    """Write `name`'s state_dict, inputs and targets to `out_dir/<file_name or name>-<mode>.npz`;
    return the path."""
    # lazy: the JAX child imports this module and has no torch (module docstring)
    from .torch_backend import load_workloads, make_workload
    wl = make_workload(load_workloads(), name, settings)
    arrays = {k: v.detach().cpu().numpy() for k, v in wl.model.state_dict().items()}
    arrays["__model_flops__"] = np.asarray(model_flops_per_step(wl.model, wl.inputs))
    if wl.name == "gpt":   # W2 and W5
        arrays["__heads__"] = np.asarray(wl.model.cfg.heads)
    if name == "accum":
        arrays["__micro__"] = np.asarray(settings.accum_micro)
    arrays["__inputs__"] = wl.inputs.numpy()
    arrays["__targets__"] = wl.targets.numpy()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{file_name or name}-{settings.mode}.npz")
    np.savez(path, **arrays)
    return path


def load_workload(path: str):
    """(params dict, meta dict with inputs, targets and model hyper-parameters), numpy arrays."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = {k.strip("_"): arrays.pop(k) for k in [k for k in arrays if k.startswith("__")]}
    return arrays, meta


def export_trace_input(shape, out_dir: str) -> str:
    """W4's input (torch.randn, seed 0) for the JAX limit, so all systems chain the same values."""
    # lazy: the JAX child imports this module and has no torch (module docstring)
    import torch
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "trace_input.npy")
    np.save(path, x.numpy())
    return path
