"""Update steps dynamo captured with autograd off, captured straight into a CALL node.

A compiled `optimizer.step()` (autograd off, the parameters and state held by the graph)
has no gradient to derive, so what AOTAutograd does for it, functionalizing its in-place updates
and lifting the module's tensors to inputs, is what lazy tracing over placeholders does
anyway (capture/function.py). Here the graph's parameters and buffers (an optimizer step's
parameters and state, which dynamo keeps as attributes of the graph) are lifted to inputs,
the graph is called on them through `torch.func.functional_call`, and the replay
(dynamo/replay.py) writes the in-place updates back. Graphs whose outputs alias their inputs
or one another keep AOTAutograd, which regenerates such views at each call.

Design: docs/design.md, "dynamo/direct.py".
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .. import metrics


class _Lifted(torch.nn.Module):
    """`gm` called with its parameters and buffers named `names` given as the last inputs."""

    def __init__(self, gm: torch.fx.GraphModule, names: list) -> None:
        super().__init__()
        self.gm = gm
        self.names = names

    def forward(self, *args):
        n = len(args) - len(self.names)
        return torch.func.functional_call(self.gm, dict(zip(self.names, args[n:])), args[:n], strict=True)


def applies(gm: torch.fx.GraphModule) -> bool:
    """Whether `gm` (being compiled now) is an update step that can skip AOTAutograd:
    autograd is off while dynamo compiles it (it runs under the grad mode it was traced in),
    it holds parameters as tensors of its own (dynamo's form of `optimizer.step()`: a
    compiled module's forward takes its parameters as inputs, and keeps AOTAutograd's
    inference graph), and no output aliases an input, a tensor of the graph or another
    output (judged from dynamo's example values; one it cannot judge keeps AOTAutograd)."""
    if torch.is_grad_enabled() or next(gm.parameters(), None) is None:
        return False
    seen: set = set()
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                seen.add(_storage(value))
        elif node.op == "output":
            for arg in torch.utils._pytree.tree_leaves(node.args):
                value = arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else arg
                if isinstance(value, torch.Tensor):
                    storage = _storage(value)
                    if storage is None or storage in seen or value._is_view():
                        return False
                    seen.add(storage)
    return None not in seen


def _storage(t: torch.Tensor):
    """`t`'s storage as a comparable key (dynamo's example values are fake tensors, which
    have one), or None."""
    try:
        return StorageWeakRef(t.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


def compile_without_autograd(gm: torch.fx.GraphModule, compiler: Callable) -> Callable:
    """The callable dynamo runs for `gm`: `compiler` (dynamo/backend.py's, boxed) applied to
    `gm` with its tensors lifted, called with the graph's inputs and those tensors."""
    named = list(gm.named_parameters(remove_duplicate=False)) + list(gm.named_buffers(remove_duplicate=False))
    lifted = [t for _, t in named]
    run = compiler(_Lifted(gm, [name for name, _ in named]), None)
    metrics.counter_add("DynamoWithoutAutograd")

    def call(*args):
        return run([*args, *lifted])
    return call
