"""The `"lazyxla"` dynamo backend: AOTAutograd graphs captured into CALL nodes.

dynamo hands the backend a torch-level FX graph (and real example inputs). The backend
rewrites `torch.ops.lazyxla.set_buffer_donor_` calls (donor.py) and tensors made from
data on the lazyxla device, runs AOTAutograd on it with lazy tensors seen as plain
tensors on the lazyxla device (plain.py), and turns each ATen graph it produces
(forward, backward, inference) into a `CompiledGraph` (replay.py); an update step (a
compiled `optimizer.step()`: autograd off, the parameters held by the graph) skips
AOTAutograd (direct.py). Graph breaks need
nothing here: dynamo runs the code between graphs as ordinary Python, i.e. lazy tracing.
Option `execute_at_call` (`options={"execute_at_call": True}`, the `"openxla"` backend of
lazyxla.compat) runs each graph when it is called, by a partial sync right after its CALL
node is inserted, instead of joining the pending step graph.

Design: docs/design.md, "Compiled functions: dynamo graphs become CALL nodes" and "dynamo/backend.py".
"""
from __future__ import annotations

import itertools
from typing import Optional

import torch
from torch._dynamo.backends.common import aot_autograd

from .. import config, metrics, patches
from ..frontend.device import DEVICE_TYPE
from ..frontend.tensor import LazyTensor
from ..ir.node import DATA
from ..sync.api import sync_tensors
from . import direct
from .donor import MARK_DONOR, is_donor_call
from .plain import treat_as_plain
from .replay import CompiledGraph

_serial = itertools.count()


_OPTIONS = ("execute_at_call",)


def _compiler(kind: str, execute_at_call: bool = False):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> object:
        graph = CompiledGraph(gm, f"compiled_{kind}_{next(_serial)}")

        def run(args):   # boxed: AOTAutograd passes the argument list itself
            results = graph(args)
            if execute_at_call:
                _materialise(results, args)
            return results
        run._boxed_call = True
        run.compiled_graph = graph
        return run
    return compile_graph


treat_as_plain("aot_autograd_subclass_test")

if config.SETTINGS.explain_recompiles:
    patches.apply("dynamo_recompile_logs")   # dynamo then says which guard failed


def _materialise(results: list, args: list) -> None:
    """execute_at_call: run the call now. Inputs that hold device data cost nothing to
    include; inputs the call updated are pending and get their new buffers."""
    lazies = [t for t in (*results, *args) if isinstance(t, LazyTensor)]
    if lazies:
        sync_tensors(lazies, wait=False)


def _aot_for(execute_at_call: bool):
    return aot_autograd(fw_compiler=_compiler("forward", execute_at_call),
                        bw_compiler=_compiler("backward", execute_at_call),
                        inference_compiler=_compiler("inference", execute_at_call),
                        keep_inference_input_mutations=True)


_aot = {False: _aot_for(False), True: _aot_for(True)}


def lazyxla_backend(gm: torch.fx.GraphModule, example_inputs, options: Optional[dict] = None):
    """torch.compile(..., backend="lazyxla", options=None): one call per graph dynamo
    traces, so a guard failure that retraces counts once more in `DynamoCompile`."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"lazyxla: unknown torch.compile option(s) {unknown} for backend='lazyxla'; "
                         f"supported: {list(_OPTIONS)}")
    metrics.counter_add("DynamoCompile")
    _materialise_example_values(gm)
    _rewrite_donor_calls(gm)
    _rewrite_data_tensors(gm)
    execute_at_call = bool(options.get("execute_at_call", False))
    if direct.applies(gm):   # an update step (a compiled optimizer step): no AOTAutograd
        return direct.compile_without_autograd(gm, _compiler("inference", execute_at_call))
    return _aot[execute_at_call](gm, example_inputs)


def _materialise_example_values(gm: torch.fx.GraphModule) -> None:
    """dynamo runs some calls for real while tracing (a tensor made from data, such as a
    Hugging Face cache's `torch.tensor([], device=...)`, and its clone) and keeps the lazy
    results as the graph's example values for the graph's life. Pending, they would be
    outputs of the next step graph only, which then differs from every later step's: a
    second compile of the whole step (GPT-2 124M: 5 s). Materialised now, by a small graph."""
    pending = [v for node in gm.graph.nodes for v in torch.utils._pytree.tree_leaves(node.meta.get("example_value"))
               if isinstance(v, LazyTensor) and v._st.value.op is not DATA]
    if pending:
        sync_tensors(pending, wait=False, donate_inplace=False)


def _rewrite_donor_calls(gm: torch.fx.GraphModule) -> None:
    """`y = set_buffer_donor_(x, d)` -> `_mark_donor(x, d)`, uses of y read x (donor.py)."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and is_donor_call(node.target):
            with gm.graph.inserting_before(node):
                gm.graph.call_function(MARK_DONOR, node.args, node.kwargs)
            node.replace_all_uses_with(node.args[0] if node.args else node.kwargs["t"])
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()


_DATA_FACTORIES = (torch.tensor, torch.as_tensor)


def _on_lazyxla(device) -> bool:
    return device is not None and torch.device(device).type == DEVICE_TYPE


def _device_of(node: torch.fx.Node):
    """The `device=` of a data factory call: a constant, or `x.device` of a graph value."""
    device = node.kwargs.get("device")
    if isinstance(device, torch.fx.Node):
        example = device.meta.get("example_value")
        return example if isinstance(example, torch.device) else None
    return device


def _rewrite_data_tensors(gm: torch.fx.GraphModule) -> None:
    """`torch.tensor(data, device=lazyxla)` / `torch.as_tensor(...)` ->
    `torch.tensor(data, <other kwargs>).to(device)`."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _DATA_FACTORIES:
            continue
        if not _on_lazyxla(_device_of(node)):
            continue
        kwargs = dict(node.kwargs)
        device = kwargs.pop("device")
        with gm.graph.inserting_after(node):
            moved = gm.graph.call_method("to", (node, device))
        node.replace_all_uses_with(moved, delete_user_cb=lambda user: user is not moved)
        node.kwargs = kwargs
        moved.meta.update(node.meta)
        changed = True
    if changed:
        gm.recompile()
