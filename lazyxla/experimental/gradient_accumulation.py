"""Gradient accumulation in one XLA loop (PyTorch/XLA's
`torch_xla.experimental.gradient_accumulation`; README.md, "Gradient accumulation").

`gradient_accumulation(train_step, iterable_tensors, model, *carried)` captures
`train_step` and its backward once, on one micro-batch, and inserts one CALL node
that runs it over the leading dimension of `iterable_tensors` in a `lax.fori_loop`,
summing the gradients; it fuses into the step graph at the next sync. Then
`param.grad = acc` where it was None, else `param.grad.add_(acc)` (the old buffer
is an automatic donor, as upstream). docs/design.md, "Gradient accumulation",
says why this loop.
"""
from __future__ import annotations

from typing import Callable, Sequence, Union

import torch
from jax import lax

from ..frontend.tensor import LazyTensor
from ..ir.call import Subprogram
from ..sync.api import sync_tensors
from ..capture import Capture, InputMutationError, capture, insert_call
from ._loop import LoopBody, check_carry, split, zeros


def gradient_accumulation(train_step: Callable[..., Union[torch.Tensor, Sequence[torch.Tensor]]],
                          iterable_tensors: Sequence[torch.Tensor], model: torch.nn.Module,
                          *carried_tensors: torch.Tensor):
    """Run `train_step(*slices, *carried)` over the leading dimension of
    `iterable_tensors` in one compiled loop; returns the accumulated loss (the mean
    over micro-batches), or `(loss, *carried)` when carried tensors are given."""
    iterables = _check_iterables(iterable_tensors)
    n_steps = iterables[0].shape[0]
    carried = list(carried_tensors)
    device = iterables[0]._st.device
    params = [p for p in model.parameters() if p.requires_grad]
    _check_device(carried + params, device)
    # The body reads these as device data (capture refuses pending outer values); a
    # partial sync without automatic donation materialises them, as upstream does.
    sync_tensors(iterables + carried + params, wait=False, donate_inplace=False)
    body = _capture_body(train_step, iterables, carried, params, n_steps)
    loop = _loop_program(body, n_steps, len(iterables), len(carried))
    results = insert_call(loop, body.operands(iterables + carried), body.out_specs, device)
    loss, new_carried, grads = results[0], results[1:1 + len(carried)], results[1 + len(carried):]
    with torch.no_grad():
        for p, acc in zip(params, grads):
            if p.grad is None:
                p.grad = acc
            else:
                p.grad.add_(acc)
    return (loss, *new_carried) if carried else loss


def _check_iterables(iterable_tensors) -> list[LazyTensor]:
    if isinstance(iterable_tensors, torch.Tensor) or not isinstance(iterable_tensors, (list, tuple)):
        raise ValueError("gradient_accumulation: iterable_tensors must be a list or tuple of tensors "
                         f"that share their leading dimension, got {type(iterable_tensors).__name__}")
    if not iterable_tensors:
        raise ValueError("gradient_accumulation: iterable_tensors is empty; pass at least one tensor "
                         "whose leading dimension is the number of micro-batches")
    for i, t in enumerate(iterable_tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"gradient_accumulation: iterable_tensors[{i}] is a {type(t).__name__}, "
                             "not a tensor")
        if t.numel() == 0 or t.dim() == 0:
            raise ValueError(f"gradient_accumulation: iterable_tensors[{i}] (shape {list(t.shape)}) has no "
                             "micro-batches to iterate over; it needs a non-empty leading dimension")
    sizes = [t.shape[0] for t in iterable_tensors]
    if len(set(sizes)) > 1:
        raise ValueError(f"gradient_accumulation: the leading dimensions of iterable_tensors differ "
                         f"({sizes}); each must be the number of micro-batches")
    if not all(isinstance(t, LazyTensor) for t in iterable_tensors):
        raise ValueError("gradient_accumulation: iterable_tensors must be on the lazyxla device; "
                         "move them with t.to(lx.device()) first")
    return list(iterable_tensors)


def _check_device(tensors: list, device: int) -> None:
    for t in tensors:
        if not isinstance(t, LazyTensor) or t._st.device != device:
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"gradient_accumulation: carried tensors and model parameters must be on "
                             f"lazyxla:{device} like iterable_tensors, got one on {where}; "
                             "move it there first")


def _capture_body(train_step: Callable, iterables: list, carried: list, params: list,
                  n_steps: int) -> Capture:
    """One micro-batch as a pure program: (slices, carried, [outer], [seeds]) ->
    (loss / N, *new carried, *gradients of loss / N)."""
    n_iter, n_carried = len(iterables), len(carried)
    saved = [p.grad for p in params]

    def body(*placeholders):
        out = train_step(*placeholders)
        loss, new_carried = _split_result(out, n_carried)
        check_carry(TypeError, "gradient_accumulation", "train_step", "carried_tensors[{}]", new_carried,
                    placeholders[n_iter:])
        scaled = loss / n_steps
        scaled.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return [scaled.detach(), *new_carried, *grads]

    for p in params:
        p.grad = None   # the body computes this micro-batch's gradients alone
    try:
        body_capture = capture(body, [t[0] for t in iterables] + carried, name="gradient_accumulation")
    finally:
        for p, g in zip(params, saved):
            p.grad = g
    if body_capture.mutated:
        names = [f"iterable_tensors[{i}] (a slice)" if i < n_iter else f"carried_tensors[{i - n_iter}]"
                 for i in body_capture.mutated]
        raise InputMutationError(
            f"gradient_accumulation: train_step wrote into its inputs {', '.join(names)}; it must be "
            "pure: return new values of carried tensors instead (e.g. `return loss, counter + 1`). "
            "Nothing was changed.")
    return body_capture


def _split_result(out, n_carried: int) -> tuple:
    if isinstance(out, torch.Tensor):
        loss, rest = out, ()
    elif isinstance(out, (list, tuple)) and out and isinstance(out[0], torch.Tensor):
        loss, rest = out[0], tuple(out[1:])
    else:
        raise TypeError("gradient_accumulation: train_step must return a loss tensor or "
                        f"(loss, *carried_tensors), got {type(out).__name__}")
    if len(rest) != n_carried:
        raise TypeError(f"gradient_accumulation: train_step returned {len(rest)} carried tensor(s) "
                        f"for {n_carried} passed in; return (loss, *new_carried) in the same order")
    if loss.numel() != 1:
        raise TypeError(f"gradient_accumulation: train_step's loss must have one element, got shape "
                        f"{list(loss.shape)}")
    return loss, rest


def _loop_program(capture: Capture, n_steps: int, n_iterables: int, n_carried: int) -> Subprogram:
    """The CALL program: (iterables, carried, [outer], [seeds]) -> (loss, *carried, *grads),
    the captured body run `n_steps` times in one fori_loop."""
    body = LoopBody(capture)
    avals = body.out_avals
    acc_avals = [avals[0]] + list(avals[1 + n_carried:])   # loss and gradients start at zero

    def fn(*operands):
        iterables, carried0, rest = split(operands, n_iterables, n_carried)

        def step(i, state):
            sums, carried = state
            slices = [lax.dynamic_index_in_dim(x, i, 0, keepdims=False) for x in iterables]
            outs = body(i, (*slices, *carried), rest)
            new_sums = (sums[0] + outs[0],) + tuple(a + g for a, g in zip(sums[1:], outs[1 + n_carried:]))
            return new_sums, tuple(outs[1:1 + n_carried])

        sums, carried = lax.fori_loop(0, n_steps, step, (zeros(acc_avals), carried0))
        return (sums[0], *carried, *sums[1:])

    return Subprogram(fn, ("gradient_accumulation", body.key, n_steps, n_iterables, n_carried),
                      f"gradient_accumulation[{n_steps}]", avals)
