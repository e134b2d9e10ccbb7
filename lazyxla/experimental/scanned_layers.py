"""`ScannedLayers(layers)`: identical layers kept as one stacked tensor per
parameter name and run as one `scan` (issue #22, "Big models").

Why a module and not only `scan_layers`. `scan_layers(model.blocks, x)` keeps
the model's structure: every layer still owns its parameters, so the loop over
layers is one compiled loop but everything around it still grows with depth:
the stack of each parameter name in the forward, one gradient per layer tensor
in the backward, and the optimizer's update of every layer tensor (AdamW: a
few fused kernels per tensor, 389 tensors for the 32-layer reference GPT).
Compiling those updates is what keeps a deep model's first step proportional to
its depth. Here the stacked tensors *are* the parameters (as in Flax's
`nn.scan` or a JAX model's stacked pytree): the optimizer sees one tensor per
name whatever the depth, the scan hands back one stacked gradient per name, and
the whole step, forward, backward and update, traces and compiles like a
one-layer model.

Options considered:
- group the optimizer's per-tensor updates inside lazyxla (stack same-shaped
  updates in the graph): keeps the model unchanged, but every step still pays
  a concatenate and a slice per tensor, and `torch.optim`'s per-parameter Python
  loop is still traced per tensor;
- stacked parameters in the module (chosen): the structural change is the
  user's explicit choice, as it is for JAX users, and nothing grows with depth.

What stays compatible: `state_dict()` names and shapes are those of the
`nn.ModuleList` it replaces (`"0.attn.weight"`, one entry per layer, views of
the stacked tensor) and `load_state_dict` accepts them, so checkpoints move
between the two forms. Optimizer state is per stacked tensor and does not.
On CPU (no lazyxla tensors) the forward is the plain Python loop over the
slices: the same module is its own eager reference.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
from torch import nn

from ..frontend.tensor import LazyTensor
from .scan import ScanError, _check_same_structure, _tensor, _trace_cache, layer_function, scan_cached


class ScannedLayers(nn.Module):
    """`len(layers)` structurally identical layers as one module whose parameters and
    buffers are stacked along a new leading dimension; `forward(*inputs)` equals
    `for layer in layers: inputs = layer(*inputs)`, run as one `scan` on lazyxla.

    `is_layer_pure=True` promises that a layer's forward depends only on its tensors
    and its inputs' shapes (as for `scan_layers`): forward and backward are then
    traced once for the module's lifetime instead of at every call. `rematerialize`
    as for `scan`: True keeps no activations and re-runs each layer in the backward."""

    def __init__(self, layers: Sequence[nn.Module], *, is_layer_pure: bool = False,
                 rematerialize: bool = True) -> None:
        super().__init__()
        layers = list(layers)
        if not layers:
            raise ScanError("ScannedLayers: give at least one layer")
        names = _check_same_structure(layers, "ScannedLayers")
        _check_untied(layers, names)
        # The stacked tensors live in a copy of layer 0 (same module tree, so the
        # same names); run one slice of them through it with functional_call.
        stacked = copy.deepcopy(layers[0])
        for name in names:
            owner, _, leaf = name.rpartition(".")
            module = stacked.get_submodule(owner)
            with torch.no_grad():
                value = torch.stack([_tensor(layer, name).detach() for layer in layers])
            if isinstance(_tensor(layers[0], name), nn.Parameter):
                requires_grad = _tensor(layers[0], name).requires_grad
                module.register_parameter(leaf, nn.Parameter(value, requires_grad=requires_grad))
            else:
                module.register_buffer(leaf, value, persistent=leaf not in module._non_persistent_buffers_set)
        self.stacked = stacked
        self.num_layers = len(layers)
        self.is_layer_pure = is_layer_pure
        self.rematerialize = rematerialize
        self._one_layer = layer_function(stacked)
        self.register_state_dict_post_hook(_per_layer_state_dict)
        self.register_load_state_dict_pre_hook(_stack_loaded_state_dict)

    def __len__(self) -> int:
        return self.num_layers

    def stacked_tensors(self) -> dict[str, torch.Tensor]:
        """Name (as in one layer) -> the stacked parameter or buffer."""
        return {**dict(self.stacked.named_parameters()), **dict(self.stacked.named_buffers())}

    def forward(self, *inputs: Any) -> Any:
        if not inputs:
            raise ScanError("ScannedLayers: give the first layer's input(s): layers(x)")
        weights = self.stacked_tensors()
        carry = inputs if len(inputs) > 1 else inputs[0]
        if not isinstance(next(iter(weights.values())), LazyTensor):
            for i in range(self.num_layers):   # eager (CPU): the plain loop over the slices
                carry, _ = self._one_layer(carry, {name: w[i] for name, w in weights.items()})
            return carry
        cache = _trace_cache(self._one_layer) if self.is_layer_pure else None
        final, _ = scan_cached(self._one_layer, carry, weights, cache, rematerialize=self.rematerialize)
        return final

    def extra_repr(self) -> str:
        return f"num_layers={self.num_layers}, layer={type(self.stacked).__name__}"


def _check_untied(layers: list, names: list[str]) -> None:
    """Stacking copies each tensor: one that several layers share would become one
    independent copy per layer, which changes the model, so it is refused."""
    owner: dict[int, tuple[int, str]] = {}
    for i, layer in enumerate(layers):
        for name in names:
            first = owner.setdefault(id(_tensor(layer, name)), (i, name))
            if first != (i, name):
                raise ScanError(f"ScannedLayers: layer {i}'s {name!r} is the same tensor as layer {first[0]}'s "
                                f"{first[1]!r}; stacking would untie them. Keep tied layers in an nn.ModuleList "
                                "and run them with lx.experimental.scan_layers")


def _per_layer_state_dict(module: ScannedLayers, state: dict, prefix: str, local_metadata) -> None:
    """state_dict hook: `prefix + "stacked." + name` (stacked) -> `prefix + "{i}." + name`
    per layer, the names of the `nn.ModuleList` this module replaces."""
    stacked_prefix = prefix + "stacked."
    for key in [k for k in state if k.startswith(stacked_prefix)]:
        value = state.pop(key)
        name = key[len(stacked_prefix):]
        for i in range(module.num_layers):
            state[f"{prefix}{i}.{name}"] = value[i]


def _stack_loaded_state_dict(module: ScannedLayers, state: dict, prefix: str, local_metadata, strict,
                             missing_keys, unexpected_keys, error_msgs) -> None:
    """load_state_dict pre-hook: per-layer entries (`prefix + "{i}." + name`) are
    stacked back into `prefix + "stacked." + name`; missing layers are left for
    load_state_dict to report as missing keys."""
    for name in module.stacked.state_dict():
        per_layer = [f"{prefix}{i}.{name}" for i in range(module.num_layers)]
        if all(key in state for key in per_layer):
            state[f"{prefix}stacked.{name}"] = torch.stack([state.pop(key) for key in per_layer])
        elif any(key in state for key in per_layer):
            absent = [key for key in per_layer if key not in state]
            error_msgs.append(f"ScannedLayers: the checkpoint has {name!r} for some layers only "
                              f"(missing {absent[:3]}{'...' if len(absent) > 3 else ''})")
            for key in per_layer:
                state.pop(key, None)
