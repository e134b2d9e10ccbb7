"""`torch_xla.distributed.fsdp.wrap`: the auto-wrap policies, which are torch's
(`torch.distributed.fsdp.wrap`; upstream's file is a copy of torch 1.13's). Upstream names
the third argument `unwrapped_params` where torch says `nonwrapped_numel`; these take
upstream's names and call torch's policies, so `functools.partial(policy, ...)` built for
either reads the same. The policies only decide which submodules to wrap: they work
with any wrapper, e.g. torch's `FullyShardedDataParallel`."""
from __future__ import annotations

from typing import Callable, Optional, Set, Type

import torch.nn as nn
from torch.distributed.fsdp import wrap as _torch_wrap

from ....unsupported import unsupported_names

always_wrap_policy = _torch_wrap.always_wrap_policy


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                            lambda_fn: Callable[[nn.Module], bool]) -> bool:
    return _torch_wrap.lambda_auto_wrap_policy(module, recurse, unwrapped_params, lambda_fn)


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: Set[Type[nn.Module]]) -> bool:
    """Recurse always; wrap the instances of `transformer_layer_cls`."""
    return _torch_wrap.transformer_auto_wrap_policy(module, recurse, unwrapped_params, transformer_layer_cls)


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                min_num_params: int = int(1e8),
                                force_leaf_modules: Optional[Set[Type[nn.Module]]] = None,
                                exclude_wrap_modules: Optional[Set[Type[nn.Module]]] = None) -> bool:
    """Wrap (and recurse into) modules with at least `min_num_params` parameters not yet
    wrapped; the sets default to this function's attributes (torch's and upstream's
    defaults), as upstream reads them."""
    own = size_based_auto_wrap_policy
    return _torch_wrap.size_based_auto_wrap_policy(
        module, recurse, unwrapped_params, min_num_params,
        own.FORCE_LEAF_MODULES if force_leaf_modules is None else force_leaf_modules,
        own.EXCLUDE_WRAP_MODULES if exclude_wrap_modules is None else exclude_wrap_modules)


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = _torch_wrap.size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = _torch_wrap.size_based_auto_wrap_policy.FORCE_LEAF_MODULES

__getattr__ = unsupported_names(__name__)
