"""Compiled optimizer steps keep their step counters on the lazyxla device.

dynamo traces `optimizer.step()` with `capturable=True` (its param-group view
says so), but it only sets the real flag, which decides where `_init_group`
creates the state, for CUDA/XPU parameters. For lazy parameters the state would
start with CPU step counters that the traced capturable code updates in place:
every compiled step would have to write a host tensor back, i.e. sync. So the
real flag is set here too, before dynamo's own decision, for groups whose
parameters are all lazy tensors and have no state yet (the same condition
dynamo applies to CUDA). Eager steps of such an optimizer then also run the
capturable code, which computes the same values on the device.
"""
from __future__ import annotations

from ..frontend.tensor import LazyTensor


def keep_steps_on_device() -> None:
    from torch._dynamo.variables.optimizer import OptimizerVariable
    original = OptimizerVariable._set_capturable
    if getattr(original, "lazyxla", False):
        return

    def _set_capturable(self, tx) -> None:
        optimizer = self.value
        for group in optimizer.param_groups:
            params = group.get("params", [])
            if ("capturable" in group and params
                    and all(isinstance(p, LazyTensor) and p not in optimizer.state for p in params)):
                group["capturable"] = True
        original(self, tx)

    _set_capturable.lazyxla = True
    OptimizerVariable._set_capturable = _set_capturable
