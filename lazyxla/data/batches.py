"""Batches as containers of tensors: chosen leaves replaced, every container kept.

A data loader yields tensors nested in tuples, named tuples, lists, dicts and other
mappings (Hugging Face's `BatchEncoding` is a `UserDict`). The batch that reaches
the training step has the same structure and container types, with the same keys
and the same extra attributes (a `BatchEncoding`'s encodings), and the source batch
is left untouched. PyTorch/XLA's loader turns tuples into lists and passes mappings
that are not dicts through with their tensors still on the host; here neither happens.
A leaf that appears twice in a batch is converted once, so the two places share the
result as they shared the source.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable, Hashable, Optional

import torch

# fn(leaf, key): key is the top-level mapping key the leaf sits under, else None
Convert = Callable[[Any, Optional[Hashable]], Any]


def map_leaves(batch: Any, fn: Convert, select: Callable[[Any], bool]) -> Any:
    """`batch` with every leaf `x` for which `select(x)` holds replaced by `fn(x, key)`;
    tensors are leaves, tuples, lists and mappings are walked into."""
    done: dict[int, tuple[Any, Any]] = {}   # id -> (source kept alive, result)

    def walk(value: Any, key: Optional[Hashable]) -> Any:
        if select(value):
            if id(value) not in done:
                done[id(value)] = (value, fn(value, key))
            return done[id(value)][1]
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, Mapping):
            top = key is None and value is batch
            return _rebuild_mapping(value, {k: walk(v, k if top else key) for k, v in value.items()})
        if isinstance(value, tuple):
            items = [walk(v, key) for v in value]
            if hasattr(value, "_fields"):   # a named tuple
                return type(value)(*items)
            return tuple(items) if type(value) is tuple else type(value)(items)
        if isinstance(value, list):
            items = [walk(v, key) for v in value]
            if type(value) is list:
                return items
            new = copy.copy(value)
            new[:] = items
            return new
        return value

    return walk(batch, None)


def _rebuild_mapping(source: Mapping, items: dict) -> Mapping:
    if type(source) is dict:
        return items
    if isinstance(source, MutableMapping):
        # a shallow copy keeps the type and its other state (a BatchEncoding's encodings,
        # a defaultdict's factory); UserDict's and dict's copies own their items
        new = copy.copy(source)
        for k, v in items.items():
            new[k] = v
        return new
    return type(source)(items)
