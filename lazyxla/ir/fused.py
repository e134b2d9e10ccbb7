"""What a fused optimizer update node writes: the one place that says which operands its
outputs replace, and in what order.

A FUSED_ADAM or FUSED_SGD node (ir/node.py) holds its ATen call's tensor lists as
arguments, in the schema's order: `(params, grads, exp_avgs, exp_avg_sqs,
max_exp_avg_sqs, state_steps)` for Adam(W), `(params, grads, momentum_buffers)` for SGD.
Its outputs are the new values of the tensors the kernel writes, list by list: the
parameters, then the optimizer state it keeps (Adam's two moments and, with amsgrad, the
running maximum; SGD's momentum buffers when momentum is on), then the gradients when
GradScaler passed `grad_scale` (the kernel writes them back unscaled). The frontend writes
its outputs into those tensors, the lowering returns its values in this order, and the IR
checker holds the outputs to the avals of those operands: all three ask `written`.
"""
from __future__ import annotations

from typing import Any, Sequence

from .node import FUSED_ADAM, FUSED_SGD

FUSED_UPDATES = (FUSED_ADAM, FUSED_SGD)


def written(op: str, args: Sequence[Sequence[Any]], kwargs: dict) -> list:
    """The entries of `args` (nodes, tensors or arrays, whichever the lists hold) whose new
    values are the outputs of a fused update `op` with options `kwargs`, in output order."""
    if op == FUSED_ADAM:
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, _steps = args
        groups = [params, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if kwargs["amsgrad"] else [])
    elif op == FUSED_SGD:
        params, grads, momentum_buffers = args
        groups = [params] + ([momentum_buffers] if kwargs["momentum"] is not None else [])
    else:
        raise ValueError(f"lazyxla: {op!r} is not a fused optimizer update")
    if kwargs["grad_scale"] is not None:
        groups.append(grads)
    return [x for group in groups for x in group]
