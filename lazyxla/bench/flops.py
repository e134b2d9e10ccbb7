"""Model FLOPs per training step and model FLOPs utilisation (MFU), the standard way
(PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's `estimate_mfu`):

    FLOPs per step = 6 * N * T + 12 * L * d * s * T

- N: the parameters that multiply activations: every parameter but the embedding tables
  read by lookup (a table tied to the output head counts: the head multiplies with it).
  6 = 2 (a multiply-add) x 3 (the forward pass, the backward pass for the inputs and for
  the weights).
- T: tokens per step (W1's MLP: samples).
- L, d, s: a transformer's layers, width and sequence length (0 for the MLP). Attention's
  QK^T and AV take 2 * 2 * s * d FLOPs per token and layer forward, x3 with the backward
  pass; the causal mask is not subtracted, since every system computes all s x s scores.
- Work outside matrix products (norms, softmax, the optimizer) is not counted.

MFU = FLOPs per step / step time / the device's peak. The peak is the bf16 matrix-unit
figure: float32 products at the platform's default precision run as bf16 passes on a TPU
and count against it too; at "highest" each takes several passes, so float32 rows show a
lower MFU than the same model under bf16 autocast.

Stdlib only at import: the report imports this module; `model_flops_per_step` takes a
torch module and is called where torch is loaded (the children, the JAX limit's export).
"""
from __future__ import annotations

# Peak dense bf16 FLOP/s of one JAX device, keyed by `jax.devices()[0].device_kind`
# (vendors' figures; on these TPUs one JAX device is one chip).
PEAK_FLOPS = {
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,   # v5e
    "TPU v5": 459e12,        # v5p
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,   # v6e (Trillium)
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA H100 80GB HBM3": 989e12,
}


def train_flops(matmul_params: int, tokens: int, layers: int = 0, width: int = 0, seq: int = 0) -> float:
    """6 * N * T + 12 * L * d * s * T (module docstring)."""
    return 6.0 * matmul_params * tokens + 12.0 * layers * width * seq * tokens


def _lookup_tables(model) -> list:
    """Embedding tables that are read only by lookup: not shared with another module (a
    table tied to the output head appears under two names)."""
    import torch   # deferred: the report imports this module without torch
    names: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        names[id(p)] = names.get(id(p), 0) + 1
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding) and names[id(m.weight)] == 1]


def _transformer_shape(model) -> tuple[int, int]:
    """(layers, width) of lazyxla/workloads.py's GPT (`cfg`) or a Hugging Face model
    (`config`); (0, 0) for a model without attention."""
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
    layers = getattr(cfg, "layers", None) or getattr(cfg, "num_hidden_layers", 0)
    width = getattr(cfg, "d", None) or getattr(cfg, "hidden_size", 0)
    return int(layers or 0), int(width or 0)


def model_flops_per_step(model, inputs) -> float | None:
    """Training FLOPs of one step of `model` on the batch `inputs`: token ids (batch...,
    seq) for a transformer, (samples, features) otherwise; None for a transformer fed
    pixels (a vision transformer's tokens are its patches, which this count does not know)."""
    matmul_params = sum(p.numel() for p in model.parameters()) - sum(t.numel() for t in _lookup_tables(model))
    layers, width = _transformer_shape(model)
    if layers and inputs.is_floating_point():
        return None
    if layers:
        return train_flops(matmul_params, inputs.numel(), layers, width, inputs.shape[-1])
    return train_flops(matmul_params, inputs.shape[0])


def mfu(flops_per_step: float | None, step_ms: float | None, device_kind: str | None) -> float | None:
    """Model FLOPs utilisation (0..1), or None where the device's peak is not known (CPU)."""
    peak = PEAK_FLOPS.get(device_kind or "")
    if not peak or not flops_per_step or not step_ms:
        return None
    return flops_per_step / (step_ms / 1e3) / peak
