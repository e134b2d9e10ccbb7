"""What a run measures: settings per mode and the list of cells (stdlib only)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

# Hugging Face models of hf_models.py (random init, tiny) trained as workloads "hf-<arch>":
# outside model code, eager against lazy and compiled mode (docs/models.md)
HF_TINY = ("hf-gpt2", "hf-llama", "hf-t5", "hf-bert", "hf-vit")
WORKLOADS = ("mlp", "gpt", "accum", "donate", "trace", "gpt2-124m") + HF_TINY
# W6, Hugging Face GPT-2 small at its real size: a step takes seconds and compiled mode's
# first step tens of seconds, so it runs only when --workloads names it; so do the tiny
# Hugging Face models (a row each per system, asked for when models are the question).
# None has a hand-written JAX version (no JAX limit).
LONG_WORKLOADS = ("gpt2-124m",) + HF_TINY
DEFAULT_WORKLOADS = tuple(w for w in WORKLOADS if w not in LONG_WORKLOADS)
HF_WORKLOADS = ("gpt2-124m",) + HF_TINY
TRAINING = ("mlp", "gpt", "accum", "gpt2-124m") + HF_TINY
SYSTEMS = ("lazyxla", "lazyxla_compiled", "eager", "jax", "torch_xla")
COMPILED = ("lazyxla_compiled",)   # torch.compile'd model, loss and optimizer step: W1/W2/W6
COMPILED_WORKLOADS = ("mlp", "gpt", "gpt2-124m") + HF_TINY
# --layers: W2 at each depth (variant "layers-N"), and on lazyxla also with its blocks run by
# lx.experimental.scan_layers ("layers-N-scan") or held as lx.experimental.ScannedLayers
# ("layers-N-stacked"): compile time and tracing against depth (docs/benchmarks.md, "Depth")
LAYERS_PREFIX = "layers-"
BLOCK_FORMS = ("scan", "stacked")
DEPTH_WORKLOADS = ("gpt",)
# W5 accum (W2 over micro-batches) on lazyxla: the gradient_accumulation API and the plain
# Python loop of backward() calls it replaces; every other system runs its own best form
# (eager and PyTorch/XLA the loop, the JAX limit lax.scan).
ACCUM_VARIANTS = ("api", "python-loop")
# --amp: the training loops again under torch.autocast (variant "amp-<dtype>"), and the JAX
# limit with autocast's mixed precision written out (jax_models.py: float32 parameters and
# optimizer, matrix products in the lower dtype); PyTorch/XLA stays float32 only.
AMP_DTYPES = {"bf16": "bfloat16"}   # --amp value -> torch and JAX dtype name
AMP_SYSTEMS = ("lazyxla", "eager", "jax")
AMP_WORKLOADS = ("mlp", "gpt")
AMP_PREFIX = "amp-"
# --spmd: W2 on SPMD_DEVICES forced host devices, lazyxla's SPMD mode beside a hand-written
# JAX jit with the same shardings: batch split over a 1-D mesh ("spmd-dp"), and also every
# parameter whose first dimension the mesh divides ("spmd-fsdp").
SPMD_PREFIX = "spmd-"
SPMD_VARIANTS = ("spmd-dp", "spmd-fsdp")
SPMD_SYSTEMS = ("lazyxla", "jax")
SPMD_WORKLOADS = ("gpt",)
SPMD_DEVICES = 8
# --gpt-size: W2's model and batch (W5 trains the same model). (GPTConfig fields, batch);
# None = lazyxla/workloads.py's reference GPT (vocab 4096, d 256, 4 heads, 4 layers,
# seq 128) and its batch of 8. "proxy" is the CPU proxy of a TPU step (issue 44): so little
# device work that the host's share of a step shows as it does on a TPU. "gpt2" is GPT-2
# small's shape; its vocabulary 50257 padded to 50304 (a multiple of 128, as nanoGPT does)
# so the embedding and head matrices tile the TPU's 128-wide matrix unit evenly. "quick" is --quick's 1-layer GPT (compile time in CI).
GPT_SIZES = {
    "quick": ({"vocab": 512, "d": 64, "heads": 4, "layers": 1, "seq": 32}, 8),
    "proxy": ({"vocab": 4096, "d": 64, "heads": 4, "layers": 4, "seq": 32}, 2),
    "reference": (None, 8),
    "gpt2": ({"vocab": 50304, "d": 768, "heads": 12, "layers": 12, "seq": 512}, 8),
}
# --matmul-precision: lazyxla's levels (lx.set_matmul_precision), which are JAX's; the JAX
# limit runs at the same one, so float32 rows compare at one precision on every platform
MATMUL_PRECISIONS = ("highest", "high", "default")


@dataclass(frozen=True)
class Settings:
    mode: str = "full"
    warmup: int = 5           # W1/W2/W4 steps before measuring (step 0 includes compile)
    steps: int = 30           # measured steps
    donate_mb: int = 1024     # W3 tensor size
    donate_iters: int = 5     # W3 in-place updates (the first one compiles)
    trace_ops: int = 2000     # W4 chained elementwise ops per step
    trace_shape: tuple = (64, 64)
    timeout_s: int = 1800     # per cell
    # W2's model (GPT_SIZES): the size's name, its GPTConfig fields (None = the reference
    # GPTConfig) and batch; `with_gpt_size` sets all three
    gpt_size: str = "reference"
    gpt_config: dict | None = None
    gpt_batch: int = 8
    # float32 matrix products in lazyxla and the JAX limit ("highest": lazyxla's default)
    matmul_precision: str = "highest"
    # W5: W2's model trained on accum_micro micro-batches of accum_batch sequences a step
    accum_micro: int = 8
    accum_batch: int = 8
    # W6: hf_models.py's model (quick mode: its tiny GPT-2), with fewer steps than W1/W2
    hf_arch: str = "gpt2_small"
    hf_warmup: int = 2
    hf_steps: int = 5
    # --phases: lazyxla's first step and a pipelined block after the measured ones recorded on
    # lx.debug.host_timeline (per-stage host ms per step); off, nothing is recorded
    phases: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Settings":
        d = dict(d)
        d["trace_shape"] = tuple(d.get("trace_shape", (64, 64)))
        return cls(**d)

    def with_gpt_size(self, name: str) -> "Settings":
        """These settings with W2's model and batch of GPT_SIZES[name]."""
        if name not in GPT_SIZES:
            raise ValueError(f"unknown GPT size {name!r}; choose from {', '.join(GPT_SIZES)}")
        config, batch = GPT_SIZES[name]
        return replace(self, gpt_size=name, gpt_config=config, gpt_batch=batch)


FULL = Settings()
# Quick mode checks that the suite runs (CI); its numbers are not the benchmark.
QUICK = Settings(mode="quick", warmup=2, steps=3, donate_mb=64, trace_ops=200, timeout_s=300,
                 accum_micro=2, accum_batch=2, hf_arch="gpt2", hf_warmup=1, hf_steps=2).with_gpt_size("quick")


@dataclass(frozen=True)
class Cell:
    """One workload x system (x aliasing, for W3) measured in one process."""
    workload: str
    system: str
    variant: str = ""          # W3: "alias-on" / "alias-off"
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.workload}{'[' + self.variant + ']' if self.variant else ''}/{self.system}"

    @property
    def aliasing(self) -> bool:
        return self.variant != "alias-off"

    @property
    def spmd(self) -> str | None:
        """The sharding of an --spmd cell ("dp" or "fsdp"), else None."""
        return self.variant[len(SPMD_PREFIX):] if self.variant.startswith(SPMD_PREFIX) else None

    @property
    def amp(self) -> str | None:
        """The autocast dtype of an --amp cell ("bf16"), else None."""
        return self.variant[len(AMP_PREFIX):] if self.variant.startswith(AMP_PREFIX) else None

    @property
    def depth(self) -> tuple[int, str] | None:
        """(layers, block form: "loop", "scan" or "stacked") of a --layers cell, else None."""
        if not self.variant.startswith(LAYERS_PREFIX):
            return None
        layers, _, form = self.variant[len(LAYERS_PREFIX):].partition("-")
        return int(layers), form or "loop"

    def settings(self, settings: Settings) -> Settings:
        """`settings` as this cell runs them: a --layers cell's W2 at its depth and block form."""
        if self.depth is None:
            return settings
        layers, form = self.depth
        config = {**(settings.gpt_config or {}), "layers": layers, "scan": form == "scan",
                  "stacked": form == "stacked"}
        return replace(settings, gpt_config=config)

    def to_dict(self) -> dict:
        return {"workload": self.workload, "system": self.system, "variant": self.variant, **self.extra}


def base_variant(variant: str) -> str:
    """The variant whose JAX limit and losses a row compares with: a --layers cell's plain
    depth ("layers-16" for "layers-16-scan"), else the plain workload's ("")."""
    if variant.startswith(LAYERS_PREFIX):
        return LAYERS_PREFIX + variant[len(LAYERS_PREFIX):].split("-")[0]
    return ""


def _depth_cells(w: str, systems, layers) -> list[Cell]:
    out = []
    for n in layers:
        out += [Cell(w, s, f"{LAYERS_PREFIX}{n}") for s in SYSTEMS if s in systems]
        if "lazyxla" in systems:
            out += [Cell(w, "lazyxla", f"{LAYERS_PREFIX}{n}-{form}") for form in BLOCK_FORMS]
    return out


def cells(workloads=WORKLOADS, systems=SYSTEMS, amp: str | None = None, spmd: bool = False,
          layers: tuple = ()) -> list[Cell]:
    """Every cell of the selected workloads and systems, grouped by workload.

    Eager PyTorch updates in place and has no notion of donation, so it runs
    W3 only once ("alias-on": plain in-place ops). With `amp` ("bf16"), each
    training workload also runs on lazyxla and eager under autocast, after its
    float32 cells; with `spmd`, W2 also runs in SPMD mode on lazyxla and the JAX limit;
    with `layers`, W2 runs at each of those depths instead of its own (`_depth_cells`)."""
    if amp is not None and amp not in AMP_DTYPES:
        raise ValueError(f"unknown amp dtype {amp!r}; choose from {', '.join(AMP_DTYPES)}")
    out = []
    for w in WORKLOADS:
        if w not in workloads:
            continue
        if layers and w in DEPTH_WORKLOADS:
            out += _depth_cells(w, systems, layers)
            continue
        for s in SYSTEMS:
            if s not in systems or (s in COMPILED and w not in COMPILED_WORKLOADS) or \
                    (s == "jax" and w in HF_WORKLOADS):
                continue
            if w == "donate":
                out.append(Cell(w, s, "alias-on"))
                if s != "eager":
                    out.append(Cell(w, s, "alias-off"))
            elif w == "accum" and s == "lazyxla":
                out += [Cell(w, s, v) for v in ACCUM_VARIANTS]
            else:
                out.append(Cell(w, s))
        if amp and w in AMP_WORKLOADS:
            out += [Cell(w, s, AMP_PREFIX + amp) for s in AMP_SYSTEMS if s in systems]
        if spmd and w in SPMD_WORKLOADS:
            out += [Cell(w, s, v) for v in SPMD_VARIANTS for s in SPMD_SYSTEMS if s in systems]
    return out
