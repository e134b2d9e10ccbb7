"""`torch_xla.distributed.fsdp.wrap`: auto-wrap policies and `recursive_wrap`.

Upstream's (FairScale's) signatures: a policy is called as
`policy(module=, recurse=, unwrapped_params=)`; with `recurse=True` it says whether to
look into the module's children, with `recurse=False` whether to wrap the module with
what is left of its parameters. (torch.distributed.fsdp.wrap names the count
`nonwrapped_numel`, so its policies do not fit here.)
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch.nn as nn

from ....unsupported import unsupported_names


def always_wrap_policy(*args: Any, **kwargs: Any) -> bool:
    return True


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int, lambda_fn: Callable) -> bool:
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: set) -> bool:
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                min_num_params: int = int(1e8), force_leaf_modules: Optional[set] = None,
                                exclude_wrap_modules: Optional[set] = None) -> bool:
    leaves = size_based_auto_wrap_policy.FORCE_LEAF_MODULES if force_leaf_modules is None else force_leaf_modules
    excluded = (size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES if exclude_wrap_modules is None
                else exclude_wrap_modules)
    large = unwrapped_params >= min_num_params
    return large and not isinstance(module, tuple(leaves if recurse else excluded))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}   # type: ignore[attr-defined]
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}   # type: ignore[attr-defined]


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
