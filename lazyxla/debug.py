"""Explaining what lazyxla did: the donation report, the memory report (memory_report.py)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, NamedTuple, Optional

import torch

from . import config
from .compile.cache import LastCompile, hlo_text as graph_hlo
from .frontend.routes import Route, route
from .frontend.tensor import LazyTensor
from .ir.check import check_graph
from .ir.node import DATA, GETITEM, SCALAR
from .ir.printer import graph_text
from .ir.walk import post_order
from .runtime import ready_times, storage_dtypes, timeline
from .state import STATE
from .memory_report import memory_report  # noqa: F401  (lx.debug.memory_report)
from .sync import barriers
from .sync import step_capture as step_capture_module
from .sync.api import pending_graphs
from .sync.pipeline import LastGraph


class DonationReport:
    """Per-parameter donation verdicts of one executed graph, with XLA's memory analysis."""

    def __init__(self, graph_key: str, kind: str, n_nodes: int, decisions: list, memory: dict) -> None:
        self.graph_key = graph_key
        self.kind = kind
        self.n_nodes = n_nodes
        self.params = [d.as_dict() for d in decisions]
        self.memory = memory
        self.donated_bytes = sum(p["bytes"] for p in self.params if p["donated"])
        self.donors = sum(1 for p in self.params if p["donated"])

    @property
    def saved_bytes(self) -> int:
        """Bytes XLA aliased between donated inputs and outputs (memory_analysis)."""
        return self.memory.get("alias_size_in_bytes", 0)

    def __str__(self) -> str:
        lines = [f"graph {self.graph_key} ({self.kind}, {self.n_nodes} nodes): "
                 f"{self.donors}/{len(self.params)} parameters donated, "
                 f"{_mb(self.donated_bytes)} donated, {_mb(self.saved_bytes)} aliased to outputs"]
        if self.memory:
            m = self.memory
            lines.append(f"  memory: arguments {_mb(m['argument_size_in_bytes'])}, outputs "
                         f"{_mb(m['output_size_in_bytes'])}, temporaries {_mb(m['temp_size_in_bytes'])}, "
                         f"aliased {_mb(m['alias_size_in_bytes'])}")
        for p in self.params:
            verdict = f"donated ({p['kind']}: {p['reason']})" if p["donated"] else f"kept: {p['reason']}"
            lines.append(f"  param {p['param']:>3} {str(p['shape']):>18} {p['dtype']:<14} "
                         f"{_mb(p['bytes']):>10}  {verdict}")
        return "\n".join(lines)

    __repr__ = __str__


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f}MB"


class HostTimeline:
    """One recording of the host timeline (`host_timeline()`): `events` as (phase, track,
    start ns, end ns, details), `summary()` per phase, `write(path)` a Chrome/Perfetto trace."""

    def __init__(self) -> None:
        self.events: list = []

    def summary(self) -> dict:
        """{phase: {"count", "total_ms", "mean_ms"}}: host phases by name (`trace` is the
        program's Python and lazyxla's tracing between syncs), `device:...` the graphs from
        launch to ready, `collector:...` Python's garbage collections."""
        return timeline.summary(self.events)

    def write(self, path: str) -> None:
        timeline.write(self.events, path)

    def __str__(self) -> str:
        rows = sorted(self.summary().items(), key=lambda kv: -kv[1]["total_ms"])
        lines = [f"host timeline: {timeline.elapsed_ms(self.events) or 0:.1f} ms recorded"]
        lines += [f"  {name:28s} {v['count']:6d} x {v['mean_ms']:9.3f} ms = {v['total_ms']:10.3f} ms"
                  for name, v in rows]
        return "\n".join(lines)


@contextlib.contextmanager
def host_timeline(path: Optional[str] = None) -> Iterator[HostTimeline]:
    """Record what the host does inside the block: tracing between syncs, each sync's stages
    (collect, plan, key and cache, compile, dispatch, install) with the user's line that
    caused it, Python's garbage collections, and each graph on the device from launch until
    its outputs are ready. On exit, `path` (if given) gets a Chrome/Perfetto trace file."""
    record = HostTimeline()
    timeline.begin()
    try:
        yield record
    finally:
        ready_times.settle()   # the device spans of graphs still running
        record.events = timeline.end()
        if path is not None:
            record.write(path)


def donation_report() -> Optional[DonationReport]:
    """Donation report of the most recently executed graph (None before the first)."""
    exe = LastGraph.executable
    if exe is None:
        return None
    return DonationReport(exe.key_hex, LastGraph.kind, LastGraph.n_nodes, LastGraph.decisions,
                          exe.memory_analysis())


def implied_barriers() -> list:
    """The last step barriers lazyxla placed itself (sync/barriers.py), oldest first: records
    of `reason` ("optimizer.step", the graph size cap), `where` (the user's file:line) and
    `nodes` (IR nodes the barrier ran); counted in `ImpliedBarrier`."""
    return barriers.recent()


def step_capture() -> "step_capture_module.Outcome":
    """What the last step barrier did with its capture (sync/step_capture.py): `outcome`
    "replayed" (one call of the recorded executable, no graph walk, no donor plan),
    "recorded" (ran as usual; the next identical step replays) or "not captured", and
    `reason`, why not (a host read in the middle of the step, lazily traced work...)."""
    return step_capture_module.LAST[0]


def explain_last_compile() -> Optional[str]:
    """Why the most recent compile happened: the first node (op, shapes, wiring) or
    donor set in which its graph differs from the closest earlier graph."""
    return LastCompile.reason


def explain_op(op) -> "Route":
    """Print the route an ATen op takes through lazyxla (lowered, decomposed, view, host
    fallback, special, foreach), the function that implements it with its file and line,
    and every fact of its record. `op`: "aten::addmm", "aten::add.Tensor" or an ATen op.
    Returns the route (`.kind`, `.function`, `.file`, `.record`)."""
    found = route(op)
    print(found.text())
    return found


def set_provenance(on: bool = True) -> None:
    """Record on each new IR node the user's file and line that made it (off by default;
    LAZYXLA_PROVENANCE=1 turns it on at import). Recompile explanations, lowering errors
    and `ir_text` then name the line. It costs a stack walk per op while on, nothing off."""
    STATE.set("provenance", bool(on))   # frontend/provenance.py follows the mode


def ir_text(tensors=None) -> str:
    """Readable IR of what a sync would compile: of `tensors` (a partial sync), or of
    every live pending tensor (a step barrier) when None. Compiles nothing."""
    texts = [graph_text(graph, donors) for graph, donors in pending_graphs(tensors)]
    return "\n".join(texts) if texts else "(nothing pending)"


def check_ir(tensors=None) -> int:
    """Check what a sync would compile (of `tensors`, or of every live pending tensor when
    None) against the IR's rules, as every sync does under LAZYXLA_CHECK_IR=1: operands,
    avals, the op records, one structure per signature (ir/check.py). Returns the number
    of nodes checked; raises `MalformedIR` naming the node and the rule it breaks.
    Compiles nothing."""
    with config.override(check_ir=False):   # each graph checked once, here, not also by collect
        graphs = pending_graphs(tensors)
    return sum(check_graph(graph) for graph, _ in graphs)


def hlo_text(tensors=None) -> str:
    """XLA HLO text of what a sync would compile (of `tensors`, or of every live pending
    tensor when None), as lazyxla hands it to XLA: lowered, not compiled, nothing run.
    Loops (scan, while_loop) show as HLO `while` instructions."""
    texts = [graph_hlo(graph, donors) for graph, donors in pending_graphs(tensors)]
    return "\n".join(texts) if texts else "(nothing pending)"


class IRNode(NamedTuple):
    """One node of `ir_nodes`. `op`: the ATen name ("aten::div.Tensor_mode"), or
    "lazyxla::data" (a device buffer), "lazyxla::scalar" (a lifted Python scalar, `value`),
    "lazyxla::getitem" (output `value` of a multi-output node) or another internal op;
    `dtype`: what torch reports; `device_dtype`: what the device holds or computes: a
    buffer's storage dtype, for other nodes that of the storage dtype policy in force
    (lx.set_storage_dtypes), what a sync now would compute in; `operands`: indices of
    earlier nodes; `roots`: positions of the tensors whose value this node is;
    `constants`: the op's Scalar arguments that are compile-time constants of the graph
    (a static exponent of `pow`), as (argument name, value) pairs in schema order; lifted
    scalars are operands instead."""
    op: str
    shape: Any
    dtype: Any
    device_dtype: Any
    operands: tuple
    roots: tuple
    device: int
    value: Any = None
    constants: tuple = ()


def ir_nodes(tensors) -> list:
    """The IR behind lazy `tensors` as they are now, operands before their users (one
    `IRNode` each; a tensor holding device data is a single "lazyxla::data" node).
    Reads nothing, compiles nothing."""
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, LazyTensor):
            raise TypeError(f"lazyxla: ir_nodes expects lazyxla tensors, got "
                            f"{t.device if isinstance(t, torch.Tensor) else type(t).__name__}")
    values = [t.checked_value() for t in tensors]
    roots: dict = {}
    for i, node in enumerate(values):
        roots.setdefault(id(node), []).append(i)
    policy = storage_dtypes.current()
    device_of = _same if policy is None else policy.storage
    index: dict = {}
    out: list = []
    for root, t in zip(values, tensors):   # root by root: a node is on the device of the first that reaches it
        for node in post_order([root], index):
            out.append(_record(node, index, device_of, tuple(roots.get(id(node), ())), t._st.device))
    return out


def _same(dtype):
    return dtype


def _record(node, index: dict, device_of, roots: tuple, device: int) -> IRNode:
    op, value = node.op, None
    if op is DATA:
        name, device_dtype = "lazyxla::data", node.data.stored_dtype
    else:
        if op is SCALAR:   # lifted scalars enter a graph in their own dtype (compile/program.py)
            name, value, device_of = "lazyxla::scalar", node.data, _same
        elif op is GETITEM:
            name, value = "lazyxla::getitem", node.args[1]
        else:
            name = op.name() if isinstance(op, torch._ops.OpOverload) else f"lazyxla::{op}"
        device_dtype = tuple(device_of(d) if d is not None else None for d in node.dtype) if node.nout \
            else device_of(node.dtype)
    return IRNode(name, node.shape, node.dtype, device_dtype, tuple(index[i] for i in node.inputs),
                  roots, device, value, _constants(node))


_NUMBERS = (bool, int, float, complex)


def _constants(node) -> tuple:
    """(name, value) of `node`'s Scalar-typed arguments held as Python numbers."""
    op = node.op
    if not isinstance(op, torch._ops.OpOverload):
        return ()
    kwargs = node.kwargs or {}
    out = []
    for i, arg in enumerate(op._schema.arguments):
        value = node.args[i] if i < len(node.args) and not arg.kwarg_only else kwargs.get(arg.name)
        if isinstance(value, _NUMBERS) and isinstance(arg.type, torch.NumberType):   # a Scalar argument
            out.append((arg.name, value))
    return tuple(out)


def tensor_info(t: torch.Tensor) -> dict:
    """What is behind lazy tensor `t`, without syncing or reading anything:

    `state`: "device data" (a buffer), "pending" (computation not run yet), "donated"
    (its buffer was donated and is gone), "failed" (it carries the error of an op that
    failed, `lx.FailedOpError`) or "view" (a view of a base tensor; the base's
    state is `base_state`); `donate`: the donation flag of the buffer (None when there is
    no buffer); `buffer_id`: an id of the buffer, equal for tensors sharing it;
    `tensor_id`: an id of `t`'s storage, equal for a tensor and its views."""
    if not isinstance(t, LazyTensor):
        raise TypeError(f"lazyxla: tensor_info expects a lazyxla tensor, got "
                        f"{t.device if isinstance(t, torch.Tensor) else type(t).__name__}")
    base = t._st.value
    if base.op is not DATA:
        base_state = "pending"
    elif base.data.donated_in is not None:
        base_state = "donated"
    elif base.data.failure is not None:
        base_state = "failed"
    else:
        base_state = "device data"
    data = base.data if base.op is DATA else None
    return {"state": base_state if t._view is None else "view", "base_state": base_state,
            "shape": tuple(t.shape), "dtype": t.dtype, "tensor_id": id(t._st),
            "donate": None if data is None else bool(data.donate),
            "buffer_id": None if data is None else id(data)}
