"""`torch_xla.distributed.fsdp.wrap`: `recursive_wrap` and the auto-wrap policies, which are torch's
(`torch.distributed.fsdp.wrap`; upstream's file is a copy of torch 1.13's). Upstream names
the third argument `unwrapped_params` where torch says `nonwrapped_numel`; these take
upstream's names and call torch's policies, so `functools.partial(policy, ...)` built for
either reads the same. The policies only decide which submodules to wrap: they work
with any wrapper, e.g. torch's `FullyShardedDataParallel`. A policy is called as
`policy(module=, recurse=, unwrapped_params=)`: with `recurse=True` it says whether to
look into the module's children, with `recurse=False` whether to wrap the module with
what is left of its parameters."""
from __future__ import annotations

from typing import Any, Callable, Optional, Set, Type

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

def _wrap(module: nn.Module, wrapper_cls: Callable, **kwargs: Any) -> nn.Module:
    overrides = getattr(module, "_wrap_overrides", None)
    return wrapper_cls(module, **({**kwargs, **overrides} if overrides else kwargs))


def recursive_wrap(module: nn.Module, auto_wrap_policy: Callable, wrapper_cls: Callable, ignored_modules,
                   ignored_params, only_wrap_children: bool = False, **kwargs: Any) -> tuple[nn.Module, int]:
    """Wrap the children of `module` (and `module` itself unless `only_wrap_children`)
    that `auto_wrap_policy` selects, innermost first, with `wrapper_cls(child, **kwargs)`.
    Returns the module (wrapped or not) and the number of parameter elements wrapped."""
    if isinstance(wrapper_cls, type):
        for name, child in module.named_modules():
            if child not in ignored_modules and isinstance(child, wrapper_cls):
                raise ValueError(f"{name or 'the module'} is wrapped already by {wrapper_cls.__name__}")
    total = sum(p.numel() for p in module.parameters() if p not in ignored_params)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=total):
        return module, 0
    wrapped = 0
    for name, child in module.named_children():
        if child in ignored_modules:
            continue
        new_child, count = recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules, ignored_params,
                                          **kwargs)
        setattr(module, name, new_child)
        wrapped += count
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False, unwrapped_params=total - wrapped):
        return _wrap(module, wrapper_cls, **kwargs), total
    return module, wrapped


__getattr__ = unsupported_names(__name__)
