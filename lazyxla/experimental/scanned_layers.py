"""Scans over identical layers (issue #22, "Big models"): `scan_layers(layers, *inputs)`
runs the layers of an `nn.ModuleList` as one `scan` over their stacked parameters,
and `ScannedLayers(layers)` keeps those parameters stacked, so that the optimizer, too,
sees one tensor per name whatever the depth. docs/design.md, "Scans over layers",
says why both exist.

`scan_layers` stacks each tensor name along a new leading dimension (one traced op
per name) and scans `torch.func.functional_call` of the first layer over the stack;
the stack's backward hands each layer its own `.grad`. `ScannedLayers.state_dict()`
has the names and shapes of the `nn.ModuleList` it replaces (`"0.attn.weight"`, one
entry per layer, views of the stacked tensor) and `load_state_dict` accepts them, so
checkpoints move between the two forms; optimizer state does not. On CPU (no lazyxla
tensors) its forward is the plain Python loop over the slices.
"""
from __future__ import annotations

import copy
import weakref
from typing import Any, Callable, Hashable, Optional, Sequence
from weakref import WeakKeyDictionary

import jax.numpy as jnp
import torch
from jax import lax
from torch import nn

from ..frontend.tensor import LazyTensor
from ..frontend.tracing import contiguous_strides
from ..ir.build import call_node, getitem_node, op_node
from ..ir.call import Subprogram
from ..ir.node import OPT_BARRIER
from ..capture import insert_call
from .scan import ScanError, scan_cached, trace_cache

# first layer -> its one-layer function, kept for layers declared pure.
_ONE_LAYER: WeakKeyDictionary = WeakKeyDictionary()


def scan_layers(layers: Sequence[torch.nn.Module], *inputs: Any, is_layer_pure: bool = False,
                rematerialize: bool = True) -> Any:
    """Run `inputs` through every module of `layers` in turn, as one loop over their
    stacked parameters; the same as `for layer in layers: inputs = layer(*inputs)`.

    `is_layer_pure=True` promises that the layers' forward depends only on their
    tensors and the inputs' shapes (no Python state that changes between calls):
    the layer is then traced, forward and backward, at the first call only.
    `rematerialize` as for `scan`."""
    layers = list(layers)
    if is_layer_pure and layers:
        fn = _ONE_LAYER.get(layers[0]) or _ONE_LAYER.setdefault(layers[0], layer_function(layers[0]))
        return scan_layers_with(fn, layers, inputs, trace_cache(fn), rematerialize=rematerialize)
    return scan_layers_with(layer_function(layers[0]) if layers else None, layers, inputs, None,
                            rematerialize=rematerialize)


def layer_function(template: torch.nn.Module) -> Callable:
    """`fn(carry, weights) -> (template run with weights on carry, None)`: one
    iteration of scan_layers. Holds `template` weakly (it may key a cache)."""
    ref = weakref.ref(template)

    def one_layer(carry, weights):
        args = carry if isinstance(carry, tuple) else (carry,)
        return torch.func.functional_call(ref(), weights, args, strict=True), None

    return one_layer


def scan_layers_with(fn: Optional[Callable], layers: list, inputs: Sequence, cache: Optional[dict],
                     tag: Hashable = None, *, rematerialize: bool = True) -> Any:
    """scan_layers with a given one-layer function (`layer_function(layers[0])`) and
    trace cache (see scan_cached)."""
    if not layers:
        return inputs[0] if len(inputs) == 1 else tuple(inputs)
    if not inputs:
        raise ScanError("scan_layers: give the first layer's input(s): scan_layers(layers, x)")
    names = _check_same_structure(layers)
    stacked = {name: _StackLayers.apply(*[_tensor(layer, name) for layer in layers]) for name in names}
    carry = tuple(inputs) if len(inputs) > 1 else inputs[0]
    final, _ = scan_cached(fn, carry, stacked, cache, tag, rematerialize=rematerialize)
    return final


class _StackLayers(torch.autograd.Function):
    """`torch.stack` of one tensor of every layer, with a backward that is a single
    `unbind` (torch's own stack backward dispatches two ops per layer)."""

    @staticmethod
    def forward(ctx, *tensors: torch.Tensor) -> torch.Tensor:
        return torch.stack(tensors)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return tuple(_unstack(grad))


def _unstack(stacked: LazyTensor) -> list[LazyTensor]:
    """`stacked.unbind(0)` as fresh tensors, read at offsets XLA cannot see as constants.

    Why: each layer's gradient feeds that layer's optimizer update. With static
    slices XLA fuses a different offset into every update kernel, so the kernels
    differ per layer and XLA:CPU compiles each anew: the first step grows with
    depth. Offsets that come out of an optimization barrier (one scalar each) are
    runtime values to XLA, so the update kernels of all layers are the same
    computation and each distinct one is compiled once."""
    n, shape, dtype = stacked.shape[0], tuple(stacked.shape[1:]), stacked.dtype
    offsets = call_node(_offsets_program(n), ())
    scalars = tuple(getitem_node(offsets, i) for i in range(n))
    barrier = op_node(OPT_BARRIER, scalars, None, tuple(s.shape for s in scalars), tuple(s.dtype for s in scalars), n)

    def fn(g, *offs):
        return tuple(lax.dynamic_index_in_dim(g, o, keepdims=False) for o in offs)

    program = Subprogram(fn, ("scan_layers_unstack", n, shape, dtype), f"unstack[{n}]", [(shape, dtype)] * n)
    spec = (shape, contiguous_strides(shape), dtype)
    operands = [stacked.checked_value()] + [getitem_node(barrier, i) for i in range(n)]
    return insert_call(program, operands, [spec] * n, stacked._st.device)


def _offsets_program(n: int) -> Subprogram:
    """() -> (0, 1, ..., n-1) as int32 scalars."""
    return Subprogram(lambda: tuple(jnp.int32(i) for i in range(n)), ("scan_layers_offsets", n),
                      f"offsets[{n}]", [((), torch.int32)] * n)


def _tensor(module: torch.nn.Module, name: str) -> torch.Tensor:
    return module.get_parameter(name) if name in dict(module.named_parameters()) else module.get_buffer(name)


def _check_same_structure(layers: list, who: str = "scan_layers") -> list[str]:
    """The names of the tensors to stack; an error naming the first difference
    (tensor names, then the module class, then shapes and dtypes)."""
    first = layers[0]
    ref = _signature(first)
    for i, layer in enumerate(layers[1:], start=1):
        sig = _signature(layer)
        kinds = f"layer {i} ({type(layer).__name__})", f"layer 0 ({type(first).__name__})"
        for name in list(ref) + [n for n in sig if n not in ref]:
            if name not in sig or name not in ref:
                has, lacks = kinds if name in sig else kinds[::-1]
                raise ScanError(f"{who}: mismatched keys: {has} has {name!r}, {lacks} has not; "
                                "every layer must have the same parameters and buffers")
        if type(layer) is not type(first):
            raise ScanError(f"{who}: layer {i} is a {type(layer).__name__}, layer 0 a "
                            f"{type(first).__name__}; every layer must have the same structure")
        for name in ref:
            (kind0, shape0, dtype0), (kind, shape, dtype) = ref[name], sig[name]
            if shape != shape0:
                raise ScanError(f"{who}: Shape mismatch of {name!r}: {list(shape0)} in layer 0, "
                                f"{list(shape)} in layer {i}; every layer must have the same shapes")
            if (kind, dtype) != (kind0, dtype0):
                raise ScanError(f"{who}: {name!r} is a {dtype0} {kind0} in layer 0 and a {dtype} "
                                f"{kind} in layer {i}; every layer must have the same dtypes and kinds")
    return list(ref)


def _signature(module: torch.nn.Module) -> dict:
    sig = {n: ("parameter", tuple(p.shape), p.dtype) for n, p in module.named_parameters()}
    sig.update({n: ("buffer", tuple(b.shape), b.dtype) for n, b in module.named_buffers()})
    return sig


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
        cache = trace_cache(self._one_layer) if self.is_layer_pure else None
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
