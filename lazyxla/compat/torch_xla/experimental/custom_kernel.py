"""`torch_xla.experimental.custom_kernel`: the kernels that have a JAX counterpart, on `lx.call_jax`.

* `flash_attention`: `jax.nn.dot_product_attention` (XLA's attention), with upstream's
  `sm_scale` (default 1.0), `causal`, segment ids and `ab` bias; gradients
  through `jax.vjp`. SPMD `partition_spec`/`mesh` are refused.
* `gmm`: grouped matmul by `jax.lax.ragged_dot` (upstream: the TPU megablox kernel).
* `repeat_with_fixed_output_size`: `jnp.repeat(..., total_repeat_length=)`, the
  algorithm upstream copied.
Paged and ragged paged attention, `tgmm` and the int8 matmul are TPU Pallas kernels
upstream and raise `UnsupportedError`.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import torch

import lazyxla as lx

from ...unsupported import refuse, unsupported_names


def _flash(q, k, v, q_segment_ids, kv_segment_ids, ab, *, causal: bool, sm_scale: float):
    mask = None
    if q_segment_ids is not None:
        mask = (q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :])
    out = jax.nn.dot_product_attention(jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2),
                                       bias=ab, mask=mask, scale=sm_scale, is_causal=causal)
    return jnp.swapaxes(out, 1, 2)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    q_segment_ids: Optional[torch.Tensor] = None, kv_segment_ids: Optional[torch.Tensor] = None,
                    sm_scale: float = 1.0, *, ab: Optional[torch.Tensor] = None, partition_spec=None,
                    mesh=None) -> torch.Tensor:
    """Attention over [batch, heads, length, head_dim] tensors (upstream's layout)."""
    if partition_spec is not None or mesh is not None:
        refuse("torch_xla.experimental.custom_kernel.flash_attention(partition_spec=..., mesh=...)",
               "shard q/k/v with lx.spmd.mark_sharding and call it without them")
    if (q_segment_ids is None) != (kv_segment_ids is None):
        raise ValueError("flash_attention: pass both q_segment_ids and kv_segment_ids, or neither")
    return lx.call_jax(_flash, q, k, v, q_segment_ids, kv_segment_ids, ab, causal=bool(causal),
                       sm_scale=float(sm_scale))


def _gmm(lhs, rhs, group_sizes, *, transpose_rhs: bool):
    if transpose_rhs:
        rhs = jnp.swapaxes(rhs, 1, 2)
    return jax.lax.ragged_dot(lhs, rhs, group_sizes.astype(jnp.int32), preferred_element_type=lhs.dtype)


def gmm(lhs: torch.Tensor, rhs: torch.Tensor, group_sizes: torch.Tensor,
        tiling: Optional[tuple[int, int, int]] = None, group_offset: Optional[torch.Tensor] = None,
        transpose_rhs: bool = False) -> torch.Tensor:
    """`lhs[start_i:end_i] @ rhs[i]` for each group i (sizes in `group_sizes`); `tiling` is
    the TPU kernel's and not needed here."""
    if group_offset is not None:
        refuse("torch_xla.experimental.custom_kernel.gmm(group_offset=...)")
    return lx.call_jax(_gmm, lhs, rhs, group_sizes, transpose_rhs=bool(transpose_rhs))


def _repeat(x, repeats, *, total: int):
    return jnp.repeat(x, repeats, total_repeat_length=total)


def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor,
                                  total_repeat_length: int) -> torch.Tensor:
    """`repeat_interleave(input, repeats)` cut or padded (with `input[-1]`) to a fixed length."""
    if input.dim() != 1 or repeats.dim() != 1:
        raise ValueError("repeat_with_fixed_output_size: input and repeats must be 1-D (as upstream)")
    return lx.call_jax(_repeat, input, repeats, total=int(total_repeat_length))


__getattr__ = unsupported_names(__name__)
