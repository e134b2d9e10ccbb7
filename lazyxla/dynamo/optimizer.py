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

dynamo also runs `_init_group` (state creation) for real while tracing. The new
state is constant fills, pending: step 0's graph would compute them where every
later step reads them as data, and compile a second step graph at step 1 (about
2 s for the reference GPT). They are materialised right there instead, by a
partial sync without donation: a small graph once, then one step graph.
"""
from __future__ import annotations

from .. import patches
from ..frontend.tensor import LazyTensor
from ..ir.node import DATA
from ..sync.api import sync_tensors


def keep_steps_on_device() -> None:
    """Wrap dynamo's OptimizerVariable (patch "dynamo_optimizer_variable")."""
    patches.apply("dynamo_optimizer_variable", _set_capturable=_capturable_for_lazy,
                  call_method=_materialising_state)


def _capturable_for_lazy(original):
    def _set_capturable(self, tx) -> None:
        optimizer = self.value
        for group in optimizer.param_groups:
            params = group.get("params", [])
            if ("capturable" in group and params
                    and all(isinstance(p, LazyTensor) and p not in optimizer.state for p in params)):
                group["capturable"] = True
        original(self, tx)
    return _set_capturable


def _materialising_state(call_method):
    def call_method_materialising_state(self, tx, name, args, kwargs):
        result = call_method(self, tx, name, args, kwargs)
        if name == "_init_group":
            _materialise_new_state(self.value)
        return result
    return call_method_materialising_state


def _materialise_new_state(optimizer) -> None:
    pending = [t for state in optimizer.state.values() for t in state.values()
               if isinstance(t, LazyTensor) and t._view is None and t._st.value.op is not DATA]
    if pending:
        sync_tensors(pending, wait=False, donate_inplace=False)
