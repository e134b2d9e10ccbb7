"""`torch_xla.experimental.spmd_fully_sharded_data_parallel`: FSDPv2, FSDP as one SPMD
program, on `lx.spmd.shard_parameters` (docs/compat.md, docs/spmd.md).

As upstream: the wrapped module moves to the device; every parameter not sharded yet
(inner units shard theirs first) is split along its first largest dimension over the
mesh's "fsdp" axis; the forward's output is sharded on "fsdp" along dimension 0
(`(extra_data_axis, "fsdp")` with `extra_data_axis`) so that GSPMD keeps activations
batch-sharded, which is what makes it FSDP; a full backward hook puts an optimization
barrier over the module's gradients so that XLA does not fuse one unit's gradient
reduction into another's. `auto_wrap_policy` wraps submodules first, with
`auto_wrapper_callable` (default: this class) and the same mesh and `shard_output`.
Where lazyxla differs: a dimension that "fsdp" does not divide stays replicated (XLA
would pad the shards; lazyxla's shardings are even).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch
import torch.nn as nn

import lazyxla as lx

from ...unsupported import unsupported_names
from ..distributed.fsdp.wrap import recursive_wrap

_AXIS = "fsdp"


def _output_spec(t: torch.Tensor, extra_data_axis: Optional[str]) -> tuple:
    first = (extra_data_axis, _AXIS) if extra_data_axis else _AXIS
    return (first,) + (None,) * (t.dim() - 1) if t.dim() else ()


def _default_shard_output(extra_data_axis: Optional[str]) -> Callable:
    def shard_output(output: Any, mesh: lx.spmd.Mesh) -> None:
        real = None
        if isinstance(output, torch.Tensor):
            real = output
        elif isinstance(output, tuple):
            real = output[0] if isinstance(output[0], torch.Tensor) else None
            warnings.warn("The output is a tuple, but only the first element is sharded. If this is not "
                          "intended, please provide your own shard_output callable.")
        if real is None:
            raise RuntimeError(f"The output type is not supported: {type(output)}. Please provide your own "
                               "shard_output callable.")
        lx.spmd.mark_sharding(real, mesh, _output_spec(real, extra_data_axis))
    return shard_output


def _backward_barrier(module: nn.Module, grad_input, grad_output) -> None:
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    grads += [g for g in grad_input if isinstance(g, torch.Tensor)]
    if grads:
        lx.optimization_barrier_(grads)


class SpmdFullyShardedDataParallel(nn.Module):
    """`SpmdFullyShardedDataParallel(module, *, mesh=None, shard_output=None,
    auto_wrap_policy=None, auto_wrapper_callable=None, extra_data_axis=None)`."""

    def __init__(self, module: nn.Module, *, mesh: Optional[lx.spmd.Mesh] = None,
                 shard_output: Optional[Callable] = None, auto_wrap_policy: Optional[Callable] = None,
                 auto_wrapper_callable: Optional[Callable] = None, extra_data_axis: Optional[str] = None) -> None:
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, first "
                               "wrap the inner child modules before wrapping the outer parent module.")
        forward = getattr(type(module), "forward", nn.Module.forward)
        if forward is nn.Module.forward:
            raise RuntimeError("The module wrapped by FSDP must define a `forward` method (do not wrap "
                               "nn.ModuleList or nn.ModuleDict) and be called through it.")
        mesh = mesh if mesh is not None else lx.spmd.get_global_mesh()
        if mesh is None:
            raise ValueError("No mesh is provided and no global mesh is set. Please provide a mesh.")
        if _AXIS not in (mesh.axis_names or ()):
            raise ValueError("The mesh must have an axis named 'fsdp'.")
        if extra_data_axis and extra_data_axis not in mesh.axis_names:
            raise ValueError(f"The provided {extra_data_axis} axis is not in the mesh.")
        super().__init__()
        if auto_wrap_policy is not None:
            for name, sub in module.named_modules():
                if isinstance(sub, SpmdFullyShardedDataParallel):
                    raise ValueError(f"Expected {name} to NOT be SpmdFullyShardedDataParallel if using an "
                                     "`auto_wrap_policy`")
            recursive_wrap(module, auto_wrap_policy, auto_wrapper_callable or SpmdFullyShardedDataParallel,
                           ignored_modules=[], ignored_params=[], only_wrap_children=True,
                           mesh=mesh, shard_output=shard_output)
        self._orig_module = module.to(lx.device())
        self._mesh = mesh
        lx.spmd.shard_parameters(module, mesh, _AXIS, dim="largest", keep_marked=True)
        module.register_full_backward_hook(_backward_barrier)
        self._shard_output = shard_output or _default_shard_output(extra_data_axis)

    @property
    def module(self) -> nn.Module:
        return self._orig_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __getitem__(self, key: int) -> nn.Module:
        return self.module.__getitem__(key)


__getattr__ = unsupported_names(__name__)
