"""`torch_xla._XLAC`: the bindings of SPEC-donation.md §1 that scripts and upstream's
donation tests call, each a call of lazyxla's public API.

Device arguments: upstream parses and then ignores the `device` of the aliasing
config (the config is process-global); so does this layer. `devices` lists of
the sync bindings name replication devices, which lazyxla has no use for.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

import lazyxla as lx

from ..unsupported import unsupported_names


def _check_device(device: str) -> None:
    if device:
        torch.device(device)   # an invalid string raises, as upstream's GetDeviceOrCurrent


# -- donation (SPEC §1.2) -----------------------------------------------------------

def _set_buffer_donation(tensor: torch.Tensor, should_donate: bool) -> bool:
    """lx.set_buffer_donation: True iff `tensor` holds device data and the flag was set.
    lazyxla also returns False for a buffer another live tensor holds (e.g. an
    unmaterialised clone), where upstream marks it and later donates the clone's data."""
    return lx.set_buffer_donation(tensor, should_donate)


def _get_buffer_donation(tensor: torch.Tensor) -> bool:
    return lx.get_buffer_donation(tensor)


def _xla_set_enable_alias_with_buffer_donor_config(enable_user_config_alias: bool = False,
                                                   device: str = "") -> None:
    """lx.set_explicit_donation for all devices (upstream's config is global)."""
    _check_device(device)
    lx.set_explicit_donation(bool(enable_user_config_alias))


def _xla_get_enable_alias_with_buffer_donor_config(device: str = "") -> bool:
    _check_device(device)
    return lx.explicit_donation_enabled()


def _is_placecholder(tensor: torch.Tensor) -> bool:   # (sic) upstream's spelling
    """True iff the tensor's buffer is gone: lazyxla's device data is never an unfilled
    placeholder to Python (results are JAX arrays as soon as a graph is dispatched), so
    the upstream cases left are donated buffers: lx.is_donated."""
    return lx.is_donated(tensor)


def _get_xla_tensor_debug_info(tensor: torch.Tensor) -> str:
    """Upstream's multi-line dump; lazyxla's fields (lx.debug.tensor_info), with
    upstream's `Data Handle: <id>|None|Deleted` line."""
    info = lx.debug.tensor_info(tensor)
    handle = {"donated": "Deleted", "pending": "None"}.get(info["state"], str(info.get("buffer_id")))
    lines = [f"XLATensor {{", f"TensorID: {info['tensor_id']}", f"Device: {tensor.device}",
             f"XLA Shape: {info['dtype']}{list(info['shape'])}", f"State: {info['state']}",
             f"ShouldDonate: {info['donate']}", f"Data Handle: {handle}", "}"]
    return "\n".join(lines) + "\n"


# -- sync (SPEC §1.1) ---------------------------------------------------------------

def _xla_sync_multi(tensors: Sequence[torch.Tensor], devices: List[str], wait: bool = True,
                    sync_xla_data: bool = True) -> None:
    """lx.sync_tensors(tensors, wait=wait, donate_inplace=sync_xla_data). With
    sync_xla_data=True lazyxla donates only buffers nothing else needs; upstream's
    partial set may donate a buffer another pending tensor reads (SPEC §3.6)."""
    lx.sync_tensors(list(tensors), wait=wait, donate_inplace=sync_xla_data)


def _xla_step_marker(device: str = "", devices: Sequence[str] = (), wait: bool = True,
                     reset_scope: bool = True) -> None:
    _check_device(device)
    lx.sync(wait=wait)


def _xla_wait_device_ops(devices: Sequence[str] = ()) -> None:
    lx.wait_device_ops()


def _xla_get_default_device() -> str:
    return str(lx.device())


# -- graph introspection (SPEC §1.4) ------------------------------------------------

def _get_graph_hash(tensors: Sequence[torch.Tensor]) -> bytes:
    """lx.graph_hash as raw bytes (upstream: 16 bytes of a 128-bit hash; lazyxla: 8 bytes)."""
    return bytes.fromhex(lx.graph_hash(list(tensors)))


def _get_xla_tensors_text(tensors: Sequence[torch.Tensor]) -> str:
    """lazyxla's IR of what a partial sync of `tensors` would compile (lx.debug.ir_text)."""
    return lx.debug.ir_text(list(tensors))


__getattr__ = unsupported_names(__name__)
