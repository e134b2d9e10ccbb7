"""The bounded executable cache and the compile step (jax.jit -> lower -> compile).

Cache key = (graph key, by its id (ir/graph.py `key_id`), donor indices, the backend's
compile token). Config switches are not part of it: two syncs that end with the same donors
share one executable. XLA compiler
options are the backend's (`compiler_options`): what they take from the graph, the graph
key covers; the rest, the compile token; JAX's persistent cache keys on them itself. Size bound:
LAZYXLA_COMPILE_CACHE_SIZE (default 1024), least recently used evicted. A miss first asks
the executable store on disk (compile/exe_store.py), which loads a graph another process
compiled without tracing or lowering it.
"""
from __future__ import annotations

import collections
import contextlib
import gc
import threading
import time
import warnings
from typing import Any, NamedTuple, Optional

import jax
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from .. import config, metrics
from .._jax import jax_devices, jax_dtype
from ..lock import check_not_forked
from ..errors import LoweringError
from ..patches import x64
from . import precision
from ..runtime import backend, placement, timeline
from ..ir.graph import Graph
from ..ir.node import OPT_BARRIER
from .explain import explain
from ..ir.scalars import scalar_avals
from .program import build
from . import disk_cache, exe_store, split
from .stable_key import stable_digest


class LastCompile:
    """Why the most recent cache miss compiled (lx.debug.explain_last_compile())."""
    reason: Optional[str] = None
_cache: "collections.OrderedDict[tuple, Executable]" = collections.OrderedDict()


class Executable:
    """One compiled graph: what `jax.stages.Compiled` gives plus our bookkeeping."""
    __slots__ = ("key_hex", "donors", "call", "compiled", "n_params", "compile_ns", "memory", "outputs")

    def __init__(self, key_hex: str, donors: tuple, compiled, n_params: int, compile_ns: int) -> None:
        self.key_hex = key_hex
        self.donors = donors
        self.compiled = compiled  # jax.stages.Compiled
        self.call = compiled      # what execute() invokes (tests may wrap it)
        self.n_params = n_params
        self.compile_ns = compile_ns
        self.memory: Optional[dict] = None
        # per output slot, what its installed handle is made of (sync/install.py `output_plan`):
        # the key fixes the outputs, so it is made at the first install and read at every later one
        self.outputs: Optional[tuple] = None

    def memory_analysis(self) -> dict:
        """XLA's memory analysis of the executable (bytes), computed once."""
        if self.memory is None:
            stats = self.compiled.memory_analysis()
            fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                      "temp_size_in_bytes", "generated_code_size_in_bytes")
            self.memory = {f: int(getattr(stats, f, 0) or 0) for f in fields} if stats is not None else {}
            if self.memory:
                m = self.memory
                m["peak_estimate_bytes"] = (m["argument_size_in_bytes"] + m["output_size_in_bytes"]
                                            - m["alias_size_in_bytes"] + m["temp_size_in_bytes"])
        return self.memory


def key_hex(key: tuple) -> str:
    return format(hash(key) & 0xFFFFFFFFFFFFFFFF, "016x")


def cache_size() -> int:
    return len(_cache)


def clear_cache() -> None:
    _cache.clear()


def _full_key(graph: Graph, donors: tuple) -> tuple:
    return (graph.key_id, donors, backend.current().compile_token)   # the key by its id (ir/graph.py)


def lookup(graph: Graph, donors: tuple) -> Optional[Executable]:
    full = _full_key(graph, donors)
    exe = _cache.get(full)
    if exe is not None:
        _cache.move_to_end(full)
    return exe


def get_or_compile(graph: Graph, donors: tuple, eager: bool = False) -> Executable:
    """The cached executable of (graph key, donors), else a compiled one (timed as
    `CompileTime`, or `EagerOpCompileTime` for an eager op's graph)."""
    exe = lookup(graph, donors)
    if exe is not None:
        metrics.counter_add("CachedCompile")
        return exe
    metrics.counter_add("UncachedCompile")
    reason = explain(graph.key, donors, graph.order)
    LastCompile.reason = reason
    settings = config.SETTINGS
    if settings.explain_recompiles:   # LAZYXLA_EXPLAIN_RECOMPILES
        warnings.warn(f"lazyxla: compiling graph {key_hex(graph.key + (donors,))}: {reason}", stacklevel=4)
    started = timeline.start()
    exe = compile_graph(graph, donors, "EagerOpCompileTime" if eager else "CompileTime")
    timeline.mark("compile", started, graph=exe.key_hex, nodes=len(graph.order), reason=reason)
    _cache[_full_key(graph, donors)] = exe
    while len(_cache) > settings.compile_cache_size:
        _cache.popitem(last=False)
    return exe


def _placements(graph: Graph) -> tuple[list, list, object]:
    """Input shardings of the parameters, of the scalar operands, and the out_shardings
    argument of jax.jit: one local device, or (SPMD) what collect() requested per output
    with GSPMD choosing the rest (None)."""
    if not placement.spmd_enabled():
        sharding = SingleDeviceSharding(jax_devices()[graph.device])
        return [sharding] * len(graph.params), sharding, sharding
    ins = [placement.sharding_of(d) for d in graph.params]
    _check_one_device_order(graph, ins)
    replicated = NamedSharding(_graph_mesh(ins), PartitionSpec())
    ins = [replicated if _fully_replicated(s) else s for s in ins]
    return ins, replicated, graph.out_shardings


def _graph_mesh(shardings: list):
    """The mesh a graph's replicated operands are expressed on: the user mesh with the
    most axes among its marked parameters (else the default replicated mesh).

    Why: for outputs whose sharding GSPMD chooses, JAX describes XLA's choice on the
    mesh of the first input's NamedSharding; on lazyxla's one-axis mesh of all devices a
    sharding tiled along two mesh axes has no description and JAX raises
    IndivisibleError. Scalars too must live on the marked tensors' device order (a mesh
    listing the devices in another order), or JAX refuses the mix."""
    marked = [s.mesh for s in shardings if isinstance(s, NamedSharding) and not _fully_replicated(s)]
    if not marked:
        return placement.replicated().mesh
    return max(marked, key=lambda mesh: len(mesh.axis_names))


def _fully_replicated(sharding) -> bool:
    return isinstance(sharding, NamedSharding) and all(p is None for p in sharding.spec)


def _check_one_device_order(graph: Graph, shardings: list) -> None:
    """One program runs on one ordering of the devices: tensors marked with meshes that
    order them differently cannot meet in a graph (JAX would refuse, less clearly)."""
    orders = {}
    for d, s in zip(graph.params, shardings):
        orders.setdefault(placement.device_order(s), d)
    if len(orders) > 1:
        (o1, d1), (o2, d2) = list(orders.items())[:2]
        raise ValueError(
            f"lazyxla: one computation uses tensors on different meshes: a tensor of shape "
            f"{list(d1.shape)} on devices {list(o1)} and one of shape {list(d2.shape)} on devices "
            f"{list(o2)}. Mark every tensor of a computation with the same mesh (or meshes listing "
            "the same devices in the same order), e.g. lx.spmd.mark_sharding(t, mesh, spec) or "
            "lx.spmd.clear_sharding(t); lx.spmd.set_global_mesh(mesh) before creating tensors makes "
            "unmarked tensors use that mesh's order. Nothing was run; the tensors keep their values.")


def compiler_options(graph: Graph) -> dict:
    """XLA options this graph is compiled with: the backend's (runtime/backend/), which
    depend on the graph only through whether it holds optimization barriers; whatever
    else they hold is in the backend's compile token, part of every cache key."""
    return backend.current().compiler_options(any(node.op is OPT_BARRIER for node in graph.order))


_gc_lock = threading.Lock()
_gc_state = {"pauses": 0, "was_enabled": False}


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic collector off while a graph is traced and compiled. Tracing
    allocates a few tracers per node and nothing it makes is garbage until the end,
    yet every 700 allocations a collection walks them, and the older generations walk
    the whole heap of torch and JAX: a third of W4's trace time (2000 nodes). Nested
    and concurrent compiles share one pause; the collector comes back as it was."""
    with _gc_lock:
        if _gc_state["pauses"] == 0:
            _gc_state["was_enabled"] = gc.isenabled()
            gc.disable()
        _gc_state["pauses"] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_state["pauses"] -= 1
            if _gc_state["pauses"] == 0 and _gc_state["was_enabled"]:
                gc.enable()


@x64
def compile_graph(graph: Graph, donors: tuple, metric: str = "CompileTime") -> Executable:
    check_not_forked()
    with _gc_paused():
        return _compile(graph, donors, metric)


class _Jitted(NamedTuple):
    """`graph`'s program as a jax.jit function for its placements and donors, with the
    avals to lower it for. Building it raises lazyxla's own errors (placements on several
    meshes) as they are; lowering comes after."""
    fn: Any
    avals: list
    matmul_precision: str

    @staticmethod
    def of(graph: Graph, donors: tuple) -> "_Jitted":
        program, _ = build(graph)
        in_shardings, scalar_sharding, out_shardings = _placements(graph)
        avals = [jax.ShapeDtypeStruct(d.shape, jax_dtype(d.stored_dtype), sharding=s)
                 for d, s in zip(graph.params, in_shardings)]
        avals += [jax.ShapeDtypeStruct(shape, dt, sharding=scalar_sharding) for shape, dt in scalar_avals(graph)]
        fn = jax.jit(program, donate_argnums=donors, keep_unused=True, out_shardings=out_shardings)
        return _Jitted(fn, avals, graph.matmul_precision)

    def lower(self) -> jax.stages.Lowered:
        with precision.lowering(self.matmul_precision):
            return self.fn.lower(*self.avals)


@x64
def hlo_text(graph: Graph, donors: tuple) -> str:
    """XLA's HLO text of `graph`'s program as handed to the compiler (before XLA's
    passes): what lx.debug.hlo_text shows."""
    with _gc_paused():
        computation = _Jitted.of(graph, donors).lower().compiler_ir("hlo")
    try:   # XLA's full form, operands with their shapes (`sine(f32[4,4]{1,0} %x.1)`)
        from jaxlib._hlo import HloPrintOptions   # optional: a private jaxlib module
    except ImportError:   # another jaxlib layout: JAX's short form
        return computation.as_hlo_text()
    options = HloPrintOptions()
    options.print_operand_shape = True
    options.print_metadata = False
    return computation.as_hlo_module().to_string(options)


def _lowered(jitted: "_Jitted", donors: tuple):
    """The graph's program lowered, traced once: whole, or in pieces (compile/split.py)
    where the backend or the user asks for it and the program has enough equations, on one
    device (a cut of an SPMD program would fix its shardings at the cut)."""
    least = backend.setting("split_compile_min_equations")
    with precision.lowering(jitted.matmul_precision):
        traced = jitted.fn.trace(*jitted.avals)
        if least and not placement.spmd_enabled() and len(traced.jaxpr.jaxpr.eqns) >= max(least, 2):
            lowered = split.lower_in_pieces(traced.jaxpr, jitted.avals, donors, least)
            metrics.counter_add("SplitCompile")
            metrics.counter_add("SplitCompilePieces", len(lowered.pieces()))
            return lowered
        return traced.lower()


def _stored_digest(graph: Graph, donors: tuple, options: Optional[dict], device) -> Optional[str]:
    """The process-stable digest the executable store keys `graph` (run on JAX `device`) by
    (compile/stable_key.py), or None where the store is off (no persistent cache, SPMD) or
    the key has no such form."""
    if disk_cache.directory() is None or placement.spmd_enabled():
        return None
    context = (tuple(sorted((options or {}).items())), backend.current().compile_token,
               backend.setting("split_compile_min_equations"), device.platform, device.device_kind)
    return stable_digest(graph, donors, context)


def _compile(graph: Graph, donors: tuple, metric: str) -> Executable:
    start = time.perf_counter_ns()
    options = compiler_options(graph) or None
    device = jax_devices()[graph.device]
    digest = _stored_digest(graph, donors, options, device)
    compiled = exe_store.load(digest, [device]) if digest else None
    if compiled is None:   # the program is built, traced and lowered only here
        loaded_before = metrics.counter_value("PersistentCacheHit") or 0
        compiled = _lower_and_compile(graph, _Jitted.of(graph, donors), donors, options)
        # only a fresh compile is stored: an executable JAX loaded from its own cache
        # serializes again without its code on XLA:CPU (it then fails to run: "Function
        # ... not found"); a hit of another thread's compile here skips a store, no more
        if digest and (metrics.counter_value("PersistentCacheHit") or 0) == loaded_before:
            exe_store.store(digest, compiled)
    elapsed = time.perf_counter_ns() - start
    metrics.metric_add(metric, elapsed)
    metrics.metric_add("InputOutputAliasCount", len(donors))
    metrics.counter_add("CreateCompileHandles")
    backend.current().after_compile()
    return Executable(key_hex(graph.key + (donors,)), donors, compiled, len(graph.params), elapsed)


def _lower_and_compile(graph: Graph, jitted: _Jitted, donors: tuple, options: Optional[dict]):
    try:
        with warnings.catch_warnings():
            # Explicit donors without a matching output are freed, not reused; JAX warns.
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            # XLA:CPU does not serialise an executable whose temporaries are split into
            # several blocks (runtime/backend/host_heap.py): such a graph is not written to the
            # persistent cache and compiles in each process; JAX warns on every write.
            warnings.filterwarnings("ignore", message="(?s).*Multiple temp buffer allocations")
            return _lowered(jitted, donors).compile(options)
    except LoweringError:
        raise
    except Exception as e:
        raise LoweringError(f"lazyxla: compiling graph {key_hex(graph.key)} "
                            f"({len(graph.order)} nodes) failed: {type(e).__name__}: {e}") from e
