"""`torch_xla.core.xla_op_registry` (xor): ops built with `xb.Op`, run by `lx.call_jax`.

As upstream, an `Op` keeps one computation per (input shapes, keyword arguments);
each is a JAX function (xla_builder.Computation), so a call is one CALL node in the
pending graph, compiled with the step."""
from __future__ import annotations

import pickle
import threading
from typing import Callable

import lazyxla as lx

from ...unsupported import unsupported_names
from . import xla_builder as xb


class Op:
    """A PyTorch operation whose lowering `opfn` is written with `xb.Op` methods."""

    def __init__(self, name: str, opfn: Callable) -> None:
        self._name = name
        self._opfn = opfn
        self._opname = 'xla::_op_' + name
        self._lock = threading.Lock()
        self._computations: dict = {}

    def __call__(self, *args, **kwargs):
        shapes = xb.tensor_shape(args)
        key = pickle.dumps([[s.shape for s in shapes], kwargs])
        with self._lock:
            computation = self._computations.get(key)
            if computation is None:
                computation = self._computations[key] = xb.create_computation(
                    self._name, self._opfn, shapes, **kwargs)
        result = lx.call_jax(computation, *args)
        return result if not isinstance(result, (tuple, list)) or len(result) != 1 else result[0]


def register(name: str, opfn: Callable) -> Op:
    """Registers a PyTorch operation with an XLA lowering function (written with `xb.Op`)."""
    return Op(name, opfn)


__getattr__ = unsupported_names(__name__)
