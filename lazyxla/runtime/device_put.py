"""Host arrays to device buffers that XLA owns: the one step of every upload that
the device-data handle also needs (`DeviceData.array` places a staged upload on first
use), so it sits below both runtime/device_data.py and runtime/transfer.py."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .. import metrics
from .._jax import jax_devices
from ..lock import check_not_forked
from ..patches import x64


@functools.lru_cache(maxsize=None)
def _owned_copy_to(sharding):
    return jax.jit(jnp.copy, out_shardings=sharding)


# Below this size an upload's device copy is a runtime buffer copy; above, a compiled
# copy. Both give an XLA-owned buffer. The compiled copy runs on XLA's threads (64 MB:
# 23 against 39 ms on 2 cores) but compiles once per shape (about 25 ms): paid for
# every new shape of a model's parameters and of each batch, it was 0.2 s of W2's
# `model.to(device)`. At 16 MB the two copies take the same time (1.4 ms).
_COMPILED_COPY_BYTES = 16 << 20


def owned(staged: jax.Array, sharding) -> jax.Array:
    """A copy of `staged` (which may alias host memory) placed by `sharding`, in
    buffers XLA owns."""
    if staged.nbytes < _COMPILED_COPY_BYTES:
        return jax.device_put(staged, sharding, may_alias=False)
    return _owned_copy_to(sharding)(staged)


@x64
def place(host: np.ndarray, sharding, device: int = 0) -> jax.Array:
    """A device array of `host`'s value in XLA-owned buffers (see `upload`). SPMD: a global
    array with `sharding`, each device receiving only its own slice (this process
    supplies those of its addressable devices); `sharding=None`: on lazyxla `device`."""
    check_not_forked()
    with metrics.timed("TransferToDeviceTime"):
        if sharding is None:
            target = jax.sharding.SingleDeviceSharding(jax_devices()[device])
            array = owned(jax.device_put(host, target), target)
        else:
            array = owned(jax.make_array_from_callback(host.shape, sharding, lambda index: host[index]),
                          sharding)
        array.block_until_ready()
    return array
