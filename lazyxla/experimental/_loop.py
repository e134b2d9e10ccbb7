"""The loop kernel that scan, while_loop / fori_loop and gradient accumulation share:
their input and carry checks, and a captured body called inside a JAX loop with a
random stream of its own per iteration."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence

import jax.numpy as jnp
import torch

from .._jax import jax_dtype
from ..frontend.tensor import LazyTensor
from ..frontend.tracing import contiguous_strides
from ..ir.call import Subprogram
from ..capture import Capture, CaptureError, capture, insert_call

# Distinct seeds per iteration: xor with i times an odd 64-bit constant (the golden
# ratio's, as int64), so iteration i of one call never reuses iteration 0's stream.
SEED_MIX = -7046029254386353131

Avals = Sequence[tuple[tuple, torch.dtype]]


# -- checks ----------------------------------------------------------------------------

def one_device(error: type, api: str, groups: Iterable[tuple[str, Sequence]], advice: str) -> int:
    """The one lazyxla device of every leaf in the `(name, leaves)` groups. Raises
    `error` naming the first leaf that is not a lazy tensor (`advice` ends that
    message), or the devices when there are several: one loop runs on one device."""
    groups = list(groups)
    for where, leaves in groups:
        for i, t in enumerate(leaves):
            if not isinstance(t, LazyTensor):
                kind = f"a {t.device} tensor" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
                raise error(f"{api}: every leaf of {where} must be a lazyxla tensor; leaf {i} is {kind}. "
                            f"{advice}")
    devices = {t._st.device for _, leaves in groups for t in leaves}
    if len(devices) > 1:
        raise error(f"{api}: the inputs are on several lazyxla devices {sorted(devices)}; use one")
    return devices.pop()


def check_carry(error: type, api: str, fn_name: str, label: str, new: Sequence[Any],
                old: Sequence[torch.Tensor]) -> None:
    """Raise `error` at the first value `fn_name` hands back for the carry (`new`) that
    is not a tensor of the shape and dtype that went in (`old`): the state of an XLA
    loop keeps one type across iterations. `label.format(i)` names carry leaf i."""
    for i, (n, o) in enumerate(zip(new, old)):
        if not isinstance(n, torch.Tensor) or n.shape != o.shape or n.dtype != o.dtype:
            got = f"{n.dtype} {list(n.shape)}" if isinstance(n, torch.Tensor) else type(n).__name__
            raise error(f"{api}: {label.format(i)} goes in as {o.dtype} {list(o.shape)} and comes back "
                        f"from {fn_name} as {got}; it must keep its shape and dtype")


def capture_body(fn: Callable[..., Sequence[LazyTensor]], examples: Sequence[LazyTensor], name: str,
                 advice: str, requires_grad: Optional[Sequence[bool]] = None) -> Capture:
    """`capture` of one iteration; a CaptureError (a host read, a write to an outer
    tensor) gets `advice`, since the user wrote a loop body and never called capture."""
    try:
        return capture(fn, examples, name=name, requires_grad=requires_grad)
    except CaptureError as e:
        raise type(e)(f"{name}: {e} ({advice})") from e


# -- inside the loop programs ----------------------------------------------------------

class LoopBody:
    """A captured iteration as a loop program calls it. Its operands are the loop's
    per-iteration values, then `rest`: the capture's outer operands and its seeds
    (`Capture.extra_operands` order). Each seed is mixed with the iteration index, so
    every iteration draws its own random values, and a loop that replays an index (a
    scan's backward) replays that iteration's values."""

    def __init__(self, body: Capture) -> None:
        self.fn = body.program.fn
        self.key = body.program.key
        self.out_avals = body.program.out_avals
        self.n_seeds = body.n_seeds

    def __call__(self, i: Any, inputs: Sequence, rest: Sequence) -> Sequence:
        split = len(rest) - self.n_seeds
        index = i.astype(jnp.int64) * SEED_MIX
        return self.fn(*inputs, *rest[:split], *(s ^ index for s in rest[split:]))


def split(operands: Sequence, *counts: int) -> list[tuple]:
    """`operands` cut into consecutive groups of `counts`, then what is left as the last."""
    groups, start = [], 0
    for n in counts:
        groups.append(tuple(operands[start:start + n]))
        start += n
    groups.append(tuple(operands[start:]))
    return groups


def zeros(avals: Avals) -> tuple:
    """Zero arrays of `avals` ((shape, torch dtype) each): a loop's accumulators."""
    return tuple(jnp.zeros(shape, jax_dtype(dtype)) for shape, dtype in avals)


def stacked(avals: Avals, length: int) -> list[tuple[tuple, torch.dtype]]:
    """`avals` with a leading dimension of `length`: what a loop stacks per iteration."""
    return [((length, *shape), dtype) for shape, dtype in avals]


def insert_loop(program: Subprogram, operands: Sequence, device: int) -> list[LazyTensor]:
    """One CALL node of a loop program in the pending graph; its outputs as new
    contiguous lazy tensors."""
    specs = [(shape, contiguous_strides(shape), dtype) for shape, dtype in program.out_avals]
    return insert_call(program, operands, specs, device)
