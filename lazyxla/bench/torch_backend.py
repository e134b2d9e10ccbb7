"""The interface the PyTorch-based systems (lazyxla, eager, PyTorch/XLA) give
the shared measurement loops in `torch_loops.py`. Imports torch only."""
from __future__ import annotations

import importlib.util
import os
import sys


class TorchBackend:
    """Defaults describe eager PyTorch on the CPU: nothing is lazy."""

    name = "eager"
    lazy = False          # whether a step has a trace phase and a sync
    foreach = True        # optimizer foreach flag

    def __init__(self, cell) -> None:
        self.cell = cell
        # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
        import torch
        self.torch = torch
        self.device = torch.device("cpu")

    def workloads(self):
        """The reference workloads module (lazyxla/workloads.py)."""
        return load_workloads()

    def set_aliasing(self, enabled: bool) -> None:
        if not enabled:
            raise ValueError(f"{self.name} has no aliasing switch")

    def set_matmul_precision(self, level: str) -> None:
        """Precision of float32 matrix products (plan.MATMUL_PRECISIONS). Eager CPU
        PyTorch computes them in float32 whatever the level."""

    def mark_step(self) -> None:
        """The step barrier (sync) that ends tracing; asynchronous where possible."""

    def wait(self) -> None:
        """Block until all scheduled device work finished."""

    def begin_step(self) -> None:
        """Reset per-step counters."""

    def compile(self, fn):
        """`fn` as the system runs it in a training step (the model, the loss, the
        optimizer step): itself, or torch.compile'd."""
        return fn

    def step_counters(self) -> dict:
        """Counters of the step just finished (compiles, graphs, traced ops, ...)."""
        return {}

    def final_info(self) -> dict:
        """Whatever the system can say about its last graph (donors, memory analysis)."""
        return {}

    gradient_accumulation = None   # the system's one-loop API (W5), where it has one
    host_timeline = None   # lx.debug.host_timeline where the system records one (--phases)

    def place_model(self, model):
        """The model on the device as the cell runs it (--spmd: its parameters sharded)."""
        return model

    def place_batch(self, t):
        """A batch tensor on the device as the cell runs it (--spmd: split over the mesh)."""
        return t

    def versions(self) -> dict:
        return {"torch": self.torch.__version__}


def make_workload(wmod, name: str, settings):
    """`wmod.make(name)`, except for W2 at another size than the reference
    (plan.GPT_SIZES) or depth (--layers), for W5 (W2's model on all micro-batches of a step
    at once), W6 and the Hugging Face models ("hf-<arch>", hf_models.py): then `wmod.make`'s
    GPT recipe (seeds, batch layout) with that config and batch, or the model of hf_models.py."""
    if name == "accum":
        return _gpt(wmod, settings.gpt_config, settings.accum_micro * settings.accum_batch)
    if name == "gpt2-124m" or name.startswith("hf-"):
        # deferred: Hugging Face's transformers loads in a second or more
        from .hf_models import HFWorkload
        return HFWorkload(name, settings.hf_arch, "sdpa") if name == "gpt2-124m" else HFWorkload(name, name[3:])
    if name != "gpt" or not settings.gpt_config:
        return wmod.make(name)
    return _gpt(wmod, settings.gpt_config, settings.gpt_batch)


def _gpt(wmod, config: dict | None, batch: int):
    # lazy: bench children load this folder as lazyxla_bench (child.py) and import only the system they measure
    import torch
    cfg = wmod.GPTConfig(**config) if config else wmod.GPTConfig()
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(0)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=gen)
    return wmod.Workload("gpt", wmod.gpt(cfg), tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def load_workloads():
    """lazyxla/workloads.py loaded by file path, without importing the lazyxla
    package (it needs only torch), so that the eager and PyTorch/XLA children stay
    free of lazyxla and JAX."""
    name = "lazyxla_bench_workloads"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
