"""lazyxla's own decompositions of single ops, run on lazy tensors (consulted before
PyTorch's table). Each exists because PyTorch's own route would go wrong here:

* native_dropout, rand_like, randn_like: PyTorch's dropout decomposition calls rand_like,
  which has no lowering and would draw on the host every step; these reach the seeded
  random ops (lower/random.py).
* rrelu_with_noise: its one random draw is uniform_'s (seeded like every lazyxla random
  op) and the write into `noise` an ordinary copy_.
* _ctc_loss / _ctc_loss_backward with tensor lengths: log-alpha's shape depends on the
  longest target, so the lengths are read to the host (a small partial sync, as eager's
  own kernel copies them to the CPU) and the int-list overloads (lower/ctc.py) do the work.
* linalg_lstsq, _linalg_check_errors: through the SVD and a host read of LAPACK's info.
* native_batch_norm: its schema hides the update of the running statistics.
* _embedding_bag_backward: the dense backward also for `sparse=True` (lazyxla has no
  sparse tensors; eager's sparse route would hand the device a sparse CPU gradient), as
  PyTorch/XLA does: the gradient is the dense form of eager's sparse one.
* F.linear_cross_entropy's chunked custom ops: Python over ATen ops, run on lazy tensors
  rather than on the host.
"""
from __future__ import annotations

import torch

from ..ir.ops import registrar

aten = torch.ops.aten
register_decomposition = registrar("decomposition")


@register_decomposition(aten.native_dropout.default)
def _native_dropout(x, p, train):
    # ATen treats train=None as training
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    keep = aten.bernoulli.p(x, 1.0 - p)        # 0/1 in x's dtype, one seeded node
    out = aten.mul.Tensor(x, keep)
    mask = aten.ne.Scalar(keep, 0)
    return aten.mul.Scalar(out, 1.0 / (1.0 - p)), mask


def _like(x, kwargs):
    kw = {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
    return torch.empty_like(x, **kw)


@register_decomposition(aten.rand_like.default)
def _rand_like(x, **kwargs):
    return _like(x, kwargs).uniform_()


@register_decomposition(aten.randn_like.default)
def _randn_like(x, **kwargs):
    return _like(x, kwargs).normal_()


# rrelu's training mode is a decomposition so that its one random draw is uniform_'s
# (seeded like every lazyxla random op) and the write into `noise` an ordinary copy_.

@register_decomposition(aten.rrelu_with_noise.default)
def _rrelu_with_noise(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    if generator is not None:  # a caller's generator: only eager can draw from it
        return NotImplemented
    if not training:  # the mean slope; `noise` is left as it is, as in eager
        return torch.nn.functional.leaky_relu(x, (lower + upper) / 2)
    # eager: an element <= 0 draws its slope from U(lower, upper), the others keep slope 1;
    # `noise` records the slopes for the backward (grad * noise)
    drawn = torch.empty_like(x).uniform_(lower, upper)
    slope = torch.where(x <= 0, drawn, torch.ones_like(drawn))
    noise.copy_(slope)
    return x * slope


@register_decomposition(aten.rrelu_with_noise_.default)
def _rrelu_with_noise_inplace(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    out = _rrelu_with_noise(x, noise, lower, upper, training, generator)
    if out is NotImplemented:
        return out
    return x.copy_(out)


@register_decomposition(aten._ctc_loss.Tensor)
def _ctc_loss_tensor_lengths(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return aten._ctc_loss.default(log_probs, targets, input_lengths.tolist(), target_lengths.tolist(), blank,
                                  zero_infinity)


@register_decomposition(aten._ctc_loss_backward.Tensor)
def _ctc_loss_backward_tensor_lengths(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
                                      blank, zero_infinity=False):
    return aten._ctc_loss_backward.default(grad, log_probs, targets, input_lengths.tolist(),
                                           target_lengths.tolist(), nll, log_alpha, blank, zero_infinity)


@register_decomposition(aten.linalg_lstsq.default)
def _lstsq(a, b, rcond=None, *, driver=None):
    """Least squares as the minimum-norm solution through the SVD, on lazy tensors: what
    eager's drivers compute for full-rank A (gels, gelsy: a pivoted QR that also gives the
    minimum-norm solution and the rank; gelsd / gelss: an SVD). Output shapes follow the
    driver, as eager's: residuals for m > n with gels always, with gelsd / gelss only when
    every matrix has full rank, a data-dependent shape: that case reads the ranks on the
    host (a partial sync, no host fallback)."""
    driver = driver or "gelsy"
    m, n = a.shape[-2:]
    vector = b.dim() == a.dim() - 1
    rhs = b.unsqueeze(-1) if vector else b
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    eps = torch.finfo(a.dtype).eps
    cutoff = (rcond if rcond is not None and rcond > 0 else eps * max(m, n)) * s[..., :1]
    keep = s > cutoff
    inv_s = torch.where(keep, 1 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    x = vh.mH @ (inv_s.unsqueeze(-1) * (u.mH @ rhs))
    rank = keep.sum(-1)
    with_residuals = m > n and (driver == "gels" or (driver in ("gelsd", "gelss") and bool((rank == n).all().cpu())))
    if with_residuals:
        residuals = (a @ x - rhs).abs().pow(2).sum(-2)
        residuals = residuals.squeeze(-1) if vector else residuals
    else:
        residuals = s.new_empty((0,))  # real for complex A, as eager's
    rank = rank if driver != "gels" else a.new_empty((0,), dtype=torch.int64)
    values = s if driver in ("gelsd", "gelss") else s.new_empty((0,))
    return (x.squeeze(-1) if vector else x), residuals, rank, values


@register_decomposition(aten._linalg_check_errors.default)
def _check_errors(info, api_name, *, is_matrix):
    """Eager's check of a LAPACK info, on the host value of `info` (a partial sync)."""
    aten._linalg_check_errors(info.cpu(), api_name, is_matrix=is_matrix)


@register_decomposition(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _bn_decomp(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if running_mean is None or running_var is None:
        if not training:
            raise RuntimeError("lazyxla: batch_norm in eval mode needs running_mean and running_var")
        return aten._native_batch_norm_legit.no_stats(x, weight, bias, True, momentum, eps)
    if not training:
        # Eager (CPU and CUDA) saves no statistics in eval mode and returns them empty,
        # shape (0,); the meta kernel says (C,), so build the empty outputs here.
        out = aten._native_batch_norm_legit_no_training.default(x, weight, bias, running_mean, running_var,
                                                                momentum, eps)[0]
        empty = x.new_empty((0,), dtype=running_mean.dtype)
        return out, empty, empty.clone()
    out, mean, invstd, new_mean, new_var = aten._native_batch_norm_legit_functional.default(
        x, weight, bias, running_mean, running_var, True, momentum, eps)
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, mean, invstd


@register_decomposition(aten._embedding_bag_backward.default)
def _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                            scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    if indices.dtype != offsets.dtype:   # eager's promoteIndicesAndOffsets
        indices, offsets = indices.long(), offsets.long()
    if indices.numel() and not offset2bag.numel():
        # eager's fast sum path leaves offset2bag empty; its backward rebuilds it
        # (make_offset2bag): index i belongs to the last bag whose offset is <= i
        starts = torch.zeros(indices.shape[0] + 1, dtype=offsets.dtype, device=offsets.device)
        starts = starts.index_add(0, offsets, torch.ones_like(offsets))
        offset2bag = (starts.cumsum(0) - 1)[:indices.shape[0]].to(offsets.dtype)
    return aten._embedding_bag_dense_backward.default(grad, indices, offset2bag, bag_size, maximum_indices,
                                                      num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                                      padding_idx)


def _register_chunked_linear_cross_entropy() -> None:
    """F.linear_cross_entropy's chunked custom ops (torch >= 2.13, `torch_nn::` namespace)
    are Python functions over ATen ops: run that Python on lazy tensors (a decomposition)
    rather than on the host. Its chunk loop unrolls into the graph; each chunk is one
    matmul and a softmax, the same arithmetic in the same order as eager."""
    try:
        from torch.nn.modules import linear_cross_entropy as lce   # optional: torch 2.13 and later
    except ImportError:  # torch before 2.13
        return
    for name in ("_linear_cross_entropy_batch_chunked", "_linear_cross_entropy_batch_chunked_no_reduction"):
        custom = getattr(lce, name, None)
        if custom is not None:
            register_decomposition(getattr(torch.ops.torch_nn, name).default)(custom._init_fn)


_register_chunked_linear_cross_entropy()
