"""`while_loop(cond_fn, body_fn, carried_inputs)` and `fori_loop(lower, upper, body_fn, *values)`:
a loop whose trip count is computed on the device, as one XLA `while` (PyTorch/XLA's
`torch_xla.experimental.fori_loop` module, and torch's own
`torch._higher_order_ops.while_loop.while_loop` on lazy tensors, through the rule
registered here for its higher-order operator).

`cond_fn` and `body_fn` are each captured once, on placeholders shaped like the
carried values, and one CALL node runs them in a `lax.while_loop`; it fuses into
the step graph at the next sync. Such a loop has no backward in XLA, so one over
values that require grad is refused (docs/design.md, "while_loop", says why).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, Union

import jax.numpy as jnp
import torch
from jax import lax
from torch._higher_order_ops.while_loop import while_loop_op
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..frontend.tensor import LazyTensor
from ..ir.call import Subprogram
from ..capture import Capture
from ._loop import LoopBody, capture_body, check_carry, insert_loop, one_device, split


class WhileLoopError(ValueError):
    """Bad input to while_loop / fori_loop (the message names the problem and the fix)."""


def while_loop(cond_fn: Callable[..., torch.Tensor], body_fn: Callable[..., Sequence[torch.Tensor]],
               carried_inputs: Sequence[Any], additional_inputs: Sequence[torch.Tensor] = ()) -> tuple:
    """Run `carried = body_fn(*carried, *additional_inputs)` while
    `cond_fn(*carried, *additional_inputs)` (a 0-d bool tensor) is true; the final
    carried values, as a tuple like `carried_inputs`. Equal to the Python loop."""
    if not callable(cond_fn) or not callable(body_fn):
        raise WhileLoopError("while_loop: cond_fn and body_fn must be callable")
    if not isinstance(carried_inputs, (tuple, list)):
        raise WhileLoopError(f"while_loop: carried_inputs must be a tuple or list, got "
                             f"{type(carried_inputs).__name__}")
    carried, spec = tree_flatten(tuple(carried_inputs))
    # Numbers among the additional inputs (torch's while_loop lifts sizes as ints) are
    # constants of the traced functions; the tensors are operands.
    fixed = list(additional_inputs)
    slots = [i for i, a in enumerate(fixed) if isinstance(a, torch.Tensor)]
    extra = [fixed[i] for i in slots]
    device = _check_inputs(carried, extra)
    n = len(carried)

    def unflat(leaves: Sequence) -> tuple:
        args = list(fixed)
        for i, t in zip(slots, leaves[n:]):
            args[i] = t
        return tree_unflatten(list(leaves[:n]), spec) + tuple(args)

    def traced_cond(*leaves: LazyTensor) -> list:
        return [_check_pred(cond_fn(*unflat(leaves)))]

    def traced_body(*leaves: LazyTensor) -> list:
        out = body_fn(*unflat(leaves))
        return _check_body_out(out, leaves[:n], spec)

    examples = carried + extra
    no_grad = [False] * len(examples)
    cond = _capture(traced_cond, examples, "while_loop_cond", no_grad)
    body = _capture(traced_body, examples, "while_loop_body", no_grad)
    if torch.is_grad_enabled() and (any(t.requires_grad for t in examples) or body.grad_closures):
        raise WhileLoopError(
            "while_loop: the loop reads tensors that require grad, and a loop whose trip count is "
            "computed on the device has no backward in XLA. Run it under torch.no_grad(), or use "
            "lx.experimental.scan (fixed length, differentiable)")
    operands = cond.cap.operands(examples) + body.cap.extra_operands()
    program = _loop_program(cond.cap, body.cap, n, len(extra))
    outs = insert_loop(program, operands, device)
    return tuple(tree_unflatten(outs, spec))


def fori_loop(lower: Union[int, torch.Tensor], upper: Union[int, torch.Tensor],
              body_fn: Callable[..., Any], *values: torch.Tensor) -> Any:
    """`values = body_fn(*values)` run `upper - lower` times (none if upper <= lower):
    the final values, one tensor if one was given, else a tuple. `lower` and `upper`
    are ints or 0-d integer lazy tensors (the count is then computed on the device)."""
    final = count_down(lower, upper, body_fn, values)[1:]
    return final[0] if len(values) == 1 else final


def count_down(lower: Union[int, torch.Tensor], upper: Union[int, torch.Tensor], body_fn: Callable[..., Any],
               values: Sequence[torch.Tensor]) -> tuple:
    """fori_loop's loop with its counter: (remaining count, *final values); the count
    starts at `upper - lower` and ends at 0 (or where it started, if not positive)."""
    if not values:
        raise WhileLoopError("fori_loop: give the loop's values: fori_loop(lower, upper, body_fn, x, ...)")
    device = torch.device("lazyxla", _check_inputs(list(values), []))
    count = _as_count(upper, device) - _as_count(lower, device)

    def cond(i: torch.Tensor, *vals: torch.Tensor) -> torch.Tensor:
        return i > 0

    def body(i: torch.Tensor, *vals: torch.Tensor) -> tuple:
        out = body_fn(*vals)
        return (i - 1, *(out if isinstance(out, (tuple, list)) else (out,)))

    return while_loop(cond, body, (count, *values))


# -- checks ----------------------------------------------------------------------------

def _check_inputs(carried: list, extra: list) -> int:
    if not carried:
        raise WhileLoopError("while_loop: carried_inputs is empty; the loop needs a value to carry")
    return one_device(WhileLoopError, "while_loop", (("carried_inputs", carried), ("additional_inputs", extra)),
                      "Move tensors with t.to(lx.device()); make a Python number a 0-d tensor on the device")


def _check_pred(pred: Any) -> torch.Tensor:
    if not isinstance(pred, torch.Tensor) or pred.dim() != 0 or pred.dtype != torch.bool:
        got = f"a {pred.dtype} tensor of shape {list(pred.shape)}" if isinstance(pred, torch.Tensor) \
            else f"a {type(pred).__name__}"
        raise WhileLoopError(f"while_loop: cond_fn must return a 0-d bool tensor computed from its "
                             f"arguments, got {got}")
    return pred


def _check_body_out(out: Any, carried: Sequence[LazyTensor], spec) -> list:
    if not isinstance(out, (tuple, list)):
        out = (out,)
    leaves, out_spec = tree_flatten(tuple(out))
    if out_spec != spec:
        raise WhileLoopError(f"while_loop: body_fn returns {out_spec}, the carried inputs are {spec}; "
                             "it must return one value per carried input, in the same structure")
    check_carry(WhileLoopError, "while_loop", "body_fn", "carried value {}", leaves, carried)
    return leaves


def _as_count(bound: Union[int, torch.Tensor], device: torch.device) -> torch.Tensor:
    if isinstance(bound, bool) or not isinstance(bound, (int, torch.Tensor)):
        raise WhileLoopError(f"fori_loop: lower and upper must be ints or 0-d integer tensors, got "
                             f"{type(bound).__name__}")
    if isinstance(bound, int):
        return torch.tensor(bound, dtype=torch.int64, device=device)
    if bound.dim() != 0 or bound.dtype.is_floating_point or bound.dtype.is_complex or bound.dtype == torch.bool:
        raise WhileLoopError(f"fori_loop: a tensor bound must be a 0-d integer tensor, got {bound.dtype} "
                             f"{list(bound.shape)}")
    return bound.to(device=device, dtype=torch.int64)


# -- capture and the loop --------------------------------------------------------------

class _Traced:
    """A captured cond or body, and whether it read closed-over tensors requiring grad."""

    def __init__(self, cap: Capture, grad_closures: bool) -> None:
        self.cap, self.grad_closures = cap, grad_closures


def _capture(fn: Callable, examples: list, name: str, requires_grad: list) -> _Traced:
    results: list = []

    def recorded(*leaves: LazyTensor) -> list:
        results.extend(fn(*leaves))
        return results

    cap = capture_body(recorded, examples, name, "while_loop traces cond_fn and body_fn once, on placeholders, "
                       "so they must be pure tensor code: no host reads such as .item() or if on a tensor, "
                       "no writes to outside tensors", requires_grad)
    return _Traced(cap, any(r.requires_grad for r in results))


def _loop_program(cond_capture: Capture, body_capture: Capture, n_carry: int, n_extra: int) -> Subprogram:
    """(*carried, *additional, *cond's outer, *cond's seeds, *body's outer, *body's seeds)
    -> (*final carried): cond and body in one lax.while_loop."""
    cond, body = LoopBody(cond_capture), LoopBody(body_capture)
    n_cond = len(cond_capture.operand_plan)

    def fn(*operands):
        carry0, extra, cond_rest, body_rest = split(operands, n_carry, n_extra, n_cond)

        def keep_going(state):
            i, carry = state
            return cond(i, (*carry, *extra), cond_rest)[0]

        def step(state):
            i, carry = state
            return i + 1, tuple(body(i, (*carry, *extra), body_rest))

        _, final = lax.while_loop(keep_going, step, (jnp.zeros((), jnp.int64), carry0))
        return final

    return Subprogram(fn, ("while_loop", cond.key, body.key, n_carry, n_extra), "while_loop", body.out_avals)


@while_loop_op.py_impl(LazyTensor)
def _torch_while_loop(cond_fn: Callable, body_fn: Callable, carried_inputs: Sequence, additional_inputs: Sequence,
                      **kwargs: Any) -> tuple:
    """torch's while_loop higher-order operator on lazy tensors."""
    if kwargs.get("stack_output"):
        raise WhileLoopError("while_loop: torch's stacked-output form (its autograd of while_loop) is not "
                             "supported on lazyxla; run the loop under torch.no_grad(), or use "
                             "lx.experimental.scan for a differentiable loop of fixed length")
    return while_loop(cond_fn, body_fn, carried_inputs, additional_inputs)
