"""`torch.amp.GradScaler("lazyxla")`: its two ATen ops, traced into the graph.

`_amp_foreach_non_finite_check_and_unscale_` (in `unscale_`) and `_amp_update_scale_` (in
`update`) are lazyxla decompositions onto lowered elementwise ops, with the semantics of
ATen's CPU and CUDA kernels (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp).
`found_inf`, which `GradScaler.step` reads on the host, is a *wide read* (storage.py):
reading it materialises all pending work of its device, so a GradScaler step is two
graphs, each compiled once. With implied barriers on, the training step ends at
`GradScaler.update`, not at the optimizer step inside `GradScaler.step`, so the scale
update joins the optimizer's graph.

Design: docs/design.md, "Autocast" and "frontend/grad_scaler.py".
"""
from __future__ import annotations

import torch

from ..ir.ops import registrar
from ..state import STATE
from .storage import mark_wide_read
from .sync_hooks import scaler_updated

# Between GradScaler's inf check (unscale_) and its scale update a GradScaler step is
# open: the optimizer step inside it is not the end of the training step, the update is
# (sync/barriers.py defers its implied barrier to `_update_scale_`): `STATE.scaler_step_open`.


def scaler_step_open() -> bool:
    return STATE.scaler_step_open


def close_scaler_step() -> None:
    """A step barrier ends any GradScaler step (one that never reached `update`)."""
    STATE.scaler_step_open = False

aten = torch.ops.aten
register_decomposition = registrar("decomposition")


def _check_scalar_float(t: torch.Tensor, name: str, op: str) -> None:
    if t.numel() != 1 or t.dtype != torch.float32:
        raise RuntimeError(f"lazyxla: {op}: {name} must be a 1-element float32 tensor, "
                           f"got shape {list(t.shape)} {t.dtype}")


@register_decomposition(aten._amp_foreach_non_finite_check_and_unscale_.default)
def _non_finite_check_and_unscale_(grads, found_inf, inv_scale) -> None:
    """found_inf = 1.0 if any element of any grad is inf or NaN (else unchanged);
    every grad *= inv_scale, computed in float32 (ATen's opmath) for 16-bit grads."""
    op = "_amp_foreach_non_finite_check_and_unscale_"
    _check_scalar_float(found_inf, "found_inf", op)
    _check_scalar_float(inv_scale, "inv_scale", op)
    if not grads:
        return
    bad = [aten.logical_not(aten.all(aten.isfinite(g))) for g in grads]
    any_bad = bad[0] if len(bad) == 1 else aten.any(aten.stack(bad))
    aten.copy_(found_inf, aten.where.ScalarSelf(any_bad, 1.0, found_inf))
    for g in grads:
        if g.dtype == inv_scale.dtype:
            aten.mul_.Tensor(g, inv_scale)
        else:
            aten.copy_(g, aten.mul.Tensor(aten._to_copy(g, dtype=inv_scale.dtype), inv_scale))
    mark_wide_read(found_inf._st)
    STATE.scaler_step_open = True


@register_decomposition(aten._amp_update_scale_.default)
def _update_scale_(scale, growth_tracker, found_inf, growth_factor: float, backoff_factor: float,
                   growth_interval: int):
    """After an inf/NaN step: scale *= backoff, tracker = 0. Otherwise tracker += 1, and
    when it reaches growth_interval: scale *= growth (kept only if finite), tracker = 0.
    The products are taken in float64 and rounded, as ATen multiplies float by double."""
    op = "_amp_update_scale_"
    _check_scalar_float(scale, "scale", op)
    _check_scalar_float(found_inf, "found_inf", op)
    if growth_tracker.numel() != 1 or growth_tracker.dtype != torch.int32:
        raise RuntimeError(f"lazyxla: {op}: growth_tracker must be a 1-element int32 tensor, "
                           f"got shape {list(growth_tracker.shape)} {growth_tracker.dtype}")
    found = aten.ne.Scalar(found_inf, 0)
    successful = aten.add.Scalar(growth_tracker, 1)
    grow = aten.eq.Scalar(successful, growth_interval)
    scale64 = aten._to_copy(scale, dtype=torch.float64)
    grown = aten._to_copy(aten.mul.Scalar(scale64, growth_factor), dtype=torch.float32)
    backed_off = aten._to_copy(aten.mul.Scalar(scale64, backoff_factor), dtype=torch.float32)
    no_inf_scale = aten.where.self(aten.logical_and(grow, aten.isfinite(grown)), grown, scale)
    aten.copy_(scale, aten.where.self(found, backed_off, no_inf_scale))
    aten.copy_(growth_tracker, aten.where.ScalarSelf(aten.logical_or(found, grow), 0, successful))
    STATE.scaler_step_open = False
    scaler_updated()
    return scale
