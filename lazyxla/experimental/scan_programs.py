"""scan's `lax.scan` programs: the forward loop over the traced iteration and the
reverse loop over its backward, and `Plan`, which inserts them into the pending graph
for one scan call."""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
from jax import lax

from ..frontend.tensor import LazyTensor
from ..ir.call import Subprogram
from ..capture import Capture, CaptureError
from ._loop import LoopBody, insert_loop, split, stacked, zeros
from .scan_trace import Trace, capture_backward, diff_positions


class Plan:
    """One scan call: the captured iteration and how to run it forward and backward."""

    def __init__(self, trace: Trace, length: int, device: int, init: list, xs: list, need_grad: bool) -> None:
        self.trace, self.length, self.device = trace, length, device
        self.body, self.forward = trace.body, trace.forward
        self.n_carry, self.n_xs = len(init), len(xs)
        self.n_out = len(trace.body.results)
        self.n_res = len(trace.body.residuals)
        self.save_carries = need_grad and trace.body.reads_carries()
        self.seeds: list = []

    def run_forward(self, init: list, xs: list) -> list[LazyTensor]:
        """Insert the forward loop: (*final carry, *ys, *residuals, [*carries at each
        iteration's start]), the last two stacked per iteration."""
        operands = self.forward.operands(list(init) + [x for x in xs])
        n_seeds = self.forward.n_seeds
        self.seeds = operands[len(operands) - n_seeds:] if n_seeds else []
        program = _forward_loop(self.forward, self.length, self.n_carry, self.n_xs, self.n_res, self.save_carries)
        return insert_loop(program, operands, self.device)

    def run_backward(self, carries: list, xs: list, g_carry: list, g_ys: list, residuals: list) -> list:
        """Insert the backward loop; the gradients of (*init, *xs, *closures), None where
        a leaf is not differentiable. `carries` is empty when the forward saved none."""
        carry_examples = [c[0] for c in carries] if self.save_carries else list(g_carry)
        x_examples = [x[0] for x in xs]
        diff_c, diff_x = diff_positions(carry_examples), diff_positions(x_examples)
        backward = self.trace.backward or capture_backward(self.body, carry_examples, x_examples,
                                                           [y[0] for y in g_ys], [r[0] for r in residuals])
        # Saving activations, random values are residuals (a dropout mask) and the
        # backward draws none; re-running fn, it replays every seed of the forward.
        if backward.n_seeds not in (0, len(self.seeds)):
            raise CaptureError(f"scan: the backward re-run of fn draws {backward.n_seeds} random seeds where "
                               f"the forward drew {len(self.seeds)}; not supported yet")
        inputs = list(carries) + list(xs) + [g_carry[i] for i in diff_c] + list(g_ys) + list(residuals)
        operands = [t.checked_value() for t in inputs]
        outer = backward.extra_operands()
        operands += outer[:len(outer) - backward.n_seeds] + (list(self.seeds) if backward.n_seeds else [])
        unsaved = None if self.save_carries else [(tuple(c.shape), c.dtype) for c in carry_examples]
        program = _backward_loop(backward, self.length, self.n_carry, len(xs), len(diff_c), len(diff_x),
                                 len(g_ys), len(residuals), unsaved)
        outs = insert_loop(program, operands, self.device)
        g_init = [None] * self.n_carry
        g_xs = [None] * len(xs)
        for i, g in zip(diff_c, outs[:len(diff_c)]):
            g_init[i] = g
        for i, g in zip(diff_x, outs[len(diff_c):len(diff_c) + len(diff_x)]):
            g_xs[i] = g
        return g_init + g_xs + list(outs[len(diff_c) + len(diff_x):])


def _forward_loop(capture: Capture, length: int, n_carry: int, n_xs: int, n_res: int,
                  save_carries: bool) -> Subprogram:
    """(*init, *xs, *outer, *seeds) -> (*final carry, *ys, *residuals, [*carries]), the
    last three stacked per iteration; carries only when `save_carries`."""
    body = LoopBody(capture)
    carry_avals, y_avals = body.out_avals[:n_carry], body.out_avals[n_carry:]   # y_avals: ys, then residuals
    out_avals = list(carry_avals) + stacked(y_avals, length) + (stacked(carry_avals, length) if save_carries else [])

    def fn(*operands):
        carry0, xs, rest = split(operands, n_carry, n_xs)

        def step(carry, inp):
            x, i = inp
            outs = body(i, (*carry, *x), rest)
            saved = carry if save_carries else ()
            return tuple(outs[:n_carry]), (tuple(outs[n_carry:]), saved)

        final, (ys, carries) = lax.scan(step, carry0, (xs, jnp.arange(length)))
        return (*final, *ys, *carries)

    return Subprogram(fn, ("scan", body.key, length, n_carry, n_xs, n_res, save_carries), f"scan[{length}]",
                      out_avals)


def _backward_loop(capture: Capture, length: int, n_carry: int, n_xs: int, n_dc: int, n_dx: int,
                   n_dy: int, n_res: int, unsaved_carries: Optional[list] = None) -> Subprogram:
    """(*carries [N,...], *xs, *d final carry, *d ys, *residuals [N,...], *outer, *seeds) ->
    (*d init, *d xs stacked, *d closures summed), the body run from the last iteration.
    `unsaved_carries`: the (shape, dtype) of each carry when the forward saved none
    (the backward iteration reads no carry: it gets zeros, dead code to XLA)."""
    body = LoopBody(capture)
    avals = body.out_avals     # d carry in, d x slices, d closures
    dc_avals, dx_avals, dcl_avals = avals[:n_dc], avals[n_dc:n_dc + n_dx], avals[n_dc + n_dx:]
    out_avals = list(dc_avals) + stacked(dx_avals, length) + list(dcl_avals)
    n_saved = n_carry if unsaved_carries is None else 0

    def fn(*operands):
        carries, xs, g_final, g_ys, residuals, rest = split(operands, n_saved, n_xs, n_dc, n_dy, n_res)

        def step(state, inp):
            g_carry, g_closures = state
            carry_in, x, g_y, res, i = inp
            if not n_saved:
                carry_in = zeros(unsaved_carries)
            outs = body(i, (*carry_in, *x, *g_carry, *g_y, *res), rest)
            summed = tuple(a + b for a, b in zip(g_closures, outs[n_dc + n_dx:]))
            return (tuple(outs[:n_dc]), summed), tuple(outs[n_dc:n_dc + n_dx])

        (g_init, g_closures), g_xs = lax.scan(step, (g_final, zeros(dcl_avals)),
                                              (carries, xs, g_ys, residuals, jnp.arange(length)),
                                              reverse=True)
        return (*g_init, *g_xs, *g_closures)

    key = ("scan_backward", body.key, length, n_carry, n_xs, n_dc, n_dx, n_dy, n_res,
           None if unsaved_carries is None else tuple(unsaved_carries))
    return Subprogram(fn, key, f"scan_backward[{length}]", out_avals)
