"""The system under test: lazyxla (model.to(lx.device()), foreach optimizer,
`lx.sync()` per step, `lx.wait_device_ops()` to time it)."""
from __future__ import annotations

from .torch_backend import TorchBackend


class LazyxlaBackend(TorchBackend):
    name = "lazyxla"
    lazy = True
    foreach = True

    def __init__(self, cell) -> None:
        super().__init__(cell)
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        import lazyxla as lx
        self.lx = lx
        self.mesh = None
        if cell.spmd:   # one virtual device over the forced host devices, a 1-D mesh
            lx.spmd.use_spmd()
            self.mesh = lx.spmd.get_1d_mesh("data")
        self.device = lx.device()
        lx.set_aliasing(cell.aliasing)   # explicit: ignores a LAZYXLA_ALIASING=0 in the environment
        self.alias_counts: list[float] = []   # InputOutputAliasCount samples, whole run
        self.gradient_accumulation = lx.experimental.gradient_accumulation
        self.host_timeline = lx.debug.host_timeline

    def workloads(self):
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        from lazyxla import workloads
        return workloads

    def place_model(self, model):
        if self.cell.spmd == "fsdp":
            self.lx.spmd.shard_parameters(model, self.mesh, "data")
        return model

    def place_batch(self, t):
        if self.mesh is None:
            return t
        return self.lx.spmd.mark_sharding(t, self.mesh, ("data",) + (None,) * (t.dim() - 1))

    def set_aliasing(self, enabled: bool) -> None:
        self.lx.set_aliasing(enabled)

    def set_matmul_precision(self, level: str) -> None:
        self.lx.set_matmul_precision(level)

    def mark_step(self) -> None:
        self.lx.sync()

    def wait(self) -> None:
        self.lx.wait_device_ops()

    def begin_step(self) -> None:
        self.lx.metrics.clear_all()

    def step_counters(self) -> dict:
        m = self.lx.metrics
        fallbacks = {n[len("aten::"):]: m.counter_value(n) for n in m.counter_names() if n.startswith("aten::")}
        alias = m.metric_data("InputOutputAliasCount")
        if alias:
            self.alias_counts += [v for _, v in alias[2]]
        compile_time = m.metric_data("CompileTime")
        reads = m.metric_data("TransferFromDeviceTime")
        return {"device_waits": m.counter_value("DeviceWait") or 0, "host_reads": reads[0] if reads else 0,
                "compiles": m.counter_value("UncachedCompile") or 0,
                "cached_compiles": m.counter_value("CachedCompile") or 0,
                "graphs": m.counter_value("ExecuteComputation") or 0,
                "traced_ops": m.counter_value("TracedOps") or 0,
                "fallbacks": sum(fallbacks.values()), "fallback_ops": sorted(fallbacks),
                "compile_s": round(compile_time[1] / 1e9, 4) if compile_time else 0.0}

    def final_info(self) -> dict:
        report = self.lx.debug.donation_report()
        info = {"alias_counts_per_compile": self.alias_counts}
        if report is not None:
            info.update({"donors_per_graph": report.donors, "params_per_graph": len(report.params),
                         "donated_mb": round(report.donated_bytes / 2**20, 2),
                         "last_graph_nodes": report.n_nodes, "memory": report.memory})
        return info

    def versions(self) -> dict:
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        import jax
        return {"torch": self.torch.__version__, "jax": jax.__version__, "lazyxla": self.lx.__version__,
                "platform": self.lx.platform(), "device_kind": jax.devices()[0].device_kind}


class CompiledBackend(LazyxlaBackend):
    """lazyxla with the model, the loss and `optimizer.step` under
    `torch.compile(backend="lazyxla")`; `lx.sync()` per step as in lazy mode."""
    name = "lazyxla_compiled"

    def compile(self, fn):
        return self.torch.compile(fn, backend="lazyxla")

    xla_compile_s = 0.0   # XLA's compiles over the cell, summed from the per-step counters

    def step_counters(self) -> dict:
        counters = super().step_counters()
        self.xla_compile_s += counters["compile_s"]
        return counters

    def final_info(self) -> dict:
        return {**super().final_info(), "compile_split_s": self.compile_split()}

    def compile_split(self) -> dict:
        """Seconds the cell spent compiling, by owner (nearly all of it in the first step):
        dynamo's frame compiles, of which the backend call (AOTAutograd and lazyxla's own
        capture of each graph) and AOTAutograd's part of that; XLA's compiles of the step's
        executables (lazyxla's `CompileTime`)."""
        times = self.torch._dynamo.utils.compilation_time_metrics   # loaded by torch.compile
        return {"dynamo": round(sum(times.get("_compile.compile_inner", ())), 3),
                "backend": round(sum(times.get("OutputGraph.call_user_compiler", ())), 3),
                "aot": round(sum(times.get("create_aot_dispatcher_function", ())), 3),
                "xla": round(self.xla_compile_s, 3)}


Backend = LazyxlaBackend
