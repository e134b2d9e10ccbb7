"""Host <-> device copies (the only places that move tensor data across)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import metrics
from .._jax import jax_devices, jax_dtype
from .device_data import DeviceData


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    # numpy() refuses tensors with the lazy conjugate / negative bit (x.conj() on CPU)
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(jax_dtype(torch.bfloat16))
    return t.numpy()


@jax.jit
def _owned_copy(x):
    return jnp.copy(x)


def upload(t: torch.Tensor, device: int, owner=None) -> DeviceData:
    """Copy a CPU tensor to `device`; the returned handle is owned by `owner`.

    On the CPU backend `jax.device_put` adopts the host memory without copying
    (also with may_alias=False, jax 0.10.2) and asynchronously, which breaks two
    promises: the device tensor would change when the source CPU tensor is later
    modified, and XLA cannot reuse an adopted buffer when it is donated (the
    first step after an upload would hold two copies). So the adopted array is
    copied once on the device into an XLA-owned buffer, and the copy completes
    before we return (a host-to-device copy is synchronous in PyTorch too).
    """
    jax_dtype(t.dtype)  # clear error for unsupported dtypes
    with metrics.timed("TransferToDeviceTime"):
        staged = jax.device_put(_to_numpy(t.cpu()), jax_devices()[device])
        array = _owned_copy(staged)
        array.block_until_ready()
        del staged
    metrics.metric_add("OutboundData", t.numel() * t.element_size())
    return DeviceData(array, tuple(t.shape), t.dtype, device, owner)


def download(array, dtype: torch.dtype) -> torch.Tensor:
    """Blocking copy of a device array to a new CPU tensor of `dtype`."""
    with metrics.timed("TransferFromDeviceTime"):
        host = np.asarray(array)
    if dtype == torch.bfloat16:
        out = torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    else:
        out = torch.from_numpy(host.copy() if not host.flags.writeable else host)
    metrics.metric_add("InboundData", out.numel() * out.element_size())
    return out if out.dtype == dtype else out.to(dtype)
