"""Host <-> device copies (the only places that move tensor data across)."""
from __future__ import annotations

import jax
import numpy as np
import torch

from .. import metrics
from .._jax import jax_devices, jax_dtype
from .device_data import DeviceData


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy array over a private copy of `t`'s data.

    On the CPU backend jax.device_put adopts a suitably aligned numpy buffer
    without copying (also with may_alias=False, jax 0.10.2), and asynchronously:
    a later in-place change of the source CPU tensor (`h.to(dev); h.mul_(0)`) then
    changed the device tensor, and a donated upload could be written through. So
    hand JAX memory nobody else can write: copy unless contiguous() already did.
    """
    src = t.detach()
    t = src.contiguous()
    if t.untyped_storage().data_ptr() == src.untyped_storage().data_ptr():
        t = t.clone()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(jax_dtype(torch.bfloat16))
    return t.numpy()


def upload(t: torch.Tensor, device: int, owner=None) -> DeviceData:
    """Copy a CPU tensor to `device`; the returned handle is owned by `owner`."""
    jax_dtype(t.dtype)  # clear error for unsupported dtypes
    with metrics.timed("TransferToDeviceTime"):
        array = jax.device_put(_to_numpy(t.cpu()), jax_devices()[device])
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
