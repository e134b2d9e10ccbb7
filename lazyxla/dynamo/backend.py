"""The `"lazyxla"` dynamo backend: AOTAutograd graphs captured into CALL nodes.

dynamo hands the backend a torch-level FX graph (and real example inputs).
The backend

1. rewrites `torch.ops.lazyxla.set_buffer_donor_` calls (donor.py), then
2. runs AOTAutograd on it, with lazy tensors seen as plain tensors on the
   lazyxla device (plain.py), keeping in-place updates
   of inputs inside inference graphs (`keep_inference_input_mutations`) so an
   optimizer step writes its parameters back without extra dispatches, and
3. turns each ATen graph it produces (forward, backward, inference) into a
   `CompiledGraph` (replay.py).

Graph breaks need nothing here: dynamo runs the code between graphs as
ordinary Python, i.e. lazy tracing.
"""
from __future__ import annotations

import itertools
import os

import torch
from torch._dynamo.backends.common import aot_autograd

from .. import metrics
from ..frontend.torch_compat import AOT_MODULES
from .donor import MARK_DONOR, is_donor_call
from .plain import treat_as_plain
from .replay import CompiledGraph

_serial = itertools.count()


def _compiler(kind: str):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs) -> object:
        graph = CompiledGraph(gm, f"compiled_{kind}_{next(_serial)}")

        def run(args):   # boxed: AOTAutograd passes the argument list itself
            return graph(args)
        run._boxed_call = True
        run.compiled_graph = graph
        return run
    return compile_graph


treat_as_plain(AOT_MODULES)

if os.environ.get("LAZYXLA_EXPLAIN_RECOMPILES") == "1":
    torch._logging.set_logs(recompiles=True)   # dynamo then says which guard failed

_aot = aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                    inference_compiler=_compiler("inference"), keep_inference_input_mutations=True)


def lazyxla_backend(gm: torch.fx.GraphModule, example_inputs):
    """torch.compile(..., backend="lazyxla"): one call per graph dynamo traces, so a
    guard failure that retraces counts once more in `DynamoCompile`."""
    metrics.counter_add("DynamoCompile")
    _rewrite_donor_calls(gm)
    return _aot(gm, example_inputs)


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
