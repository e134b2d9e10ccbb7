"""PyTorch/XLA, run by a separate interpreter (`--torch-xla-python`) that has
its own torch and torch_xla; this module imports neither lazyxla nor JAX.
Aliasing off is PyTorch/XLA's `XLA_ENABLE_PARAM_ALIASING=0`, set before import."""
from __future__ import annotations

import os

from .torch_backend import TorchBackend


class TorchXlaBackend(TorchBackend):
    name = "torch_xla"
    lazy = True
    foreach = None   # torch.optim's default for XLA tensors (what users run)

    def __init__(self, cell) -> None:
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        os.environ["XLA_ENABLE_PARAM_ALIASING"] = "1" if cell.aliasing else "0"
        super().__init__(cell)
        # deferred: after the environment above, which PyTorch/XLA reads at import
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        self.torch_xla, self.xm, self.met = torch_xla, xm, met
        self.device = torch_xla.device() if hasattr(torch_xla, "device") else xm.xla_device()
        self.alias_counts: list[float] = []

    def set_aliasing(self, enabled: bool) -> None:
        pass  # done through the environment in __init__, before torch_xla starts

    def mark_step(self) -> None:
        if hasattr(self.torch_xla, "sync"):
            self.torch_xla.sync()
        else:
            self.xm.mark_step()

    def wait(self) -> None:
        self.xm.wait_device_ops()

    def begin_step(self) -> None:
        self.met.clear_all()

    def _counter(self, name: str) -> int:
        return self.met.counter_value(name) or 0

    def step_counters(self) -> dict:
        met = self.met
        execute = met.metric_data("ExecuteTime")
        alias = met.metric_data("InputOutputAliasCount")
        if alias:
            self.alias_counts += [v for _, v in alias[2]]
        fallbacks = {n[len("aten::"):]: met.counter_value(n) for n in met.counter_names() if n.startswith("aten::")}
        compile_time = met.metric_data("CompileTime")
        return {"compiles": self._counter("UncachedCompile"), "cached_compiles": self._counter("CachedCompile"),
                "graphs": execute[0] if execute else 0,
                "fallbacks": sum(fallbacks.values()), "fallback_ops": sorted(fallbacks),
                "compile_s": round(compile_time[1] / 1e9, 4) if compile_time else 0.0}

    def final_info(self) -> dict:
        info = {"alias_counts_per_compile": self.alias_counts}
        if self.alias_counts:
            info["donors_per_graph"] = int(self.alias_counts[-1])
        return info

    def versions(self) -> dict:
        return {"torch": self.torch.__version__, "torch_xla": getattr(self.torch_xla, "__version__", "?")}


Backend = TorchXlaBackend
