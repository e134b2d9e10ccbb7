"""Every change lazyxla makes to torch's or JAX's process-wide state, listed in one place.

Each change is a `Patch`: a name, the objects it changes, why lazyxla needs it, the library
releases it was verified with, and `apply` / `undo`. The modules that need a change call
`apply(name, ...)` with what only they know (the lazy tensor type, the wrapper code); the
saving, guarding and restoring happen here. `PATCHES` is the list, `applied()` says which
are in force. Applying a patch fails, naming the patch and the running release, when an
object it changes is missing, and warns once outside its verified releases. JAX's 64-bit
mode is not a patch: lazyxla's entry points run under `in_x64()` (thread-local).
A leaf: it imports torch and JAX but nothing from lazyxla except `_versions`; the deferred
`_disable_dynamo` wrappers are in dynamo_deferral.py.

Design: docs/design.md, "patches/__init__.py".
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import sys
from typing import Any, Callable, TypeVar

import jax
import torch
from torch.optim import optimizer as torch_optimizer

from .._versions import JAX_VERIFIED, TORCH_VERIFIED, Minor, warn_if_unverified
from . import dynamo_deferral

F = TypeVar("F", bound=Callable[..., Any])
_UNSET = object()


def in_x64() -> contextlib.AbstractContextManager:
    """JAX's 64-bit mode for the body, on this thread only: lazyxla's transfers, compiles,
    executions and host reads run in it, so int64/float64 tensors stay exact."""
    return jax.enable_x64(True)


def out_of_x64() -> contextlib.AbstractContextManager:
    """JAX's 32-bit mode for the body, on this thread only: a user's JAX function or one of
    JAX's own algorithms in a graph that holds no 64-bit type is traced and lowered in it
    (compile/without_x64.py)."""
    return jax.enable_x64(False)


def x64(fn: F) -> F:
    """Decorator: run `fn` under `in_x64()`."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)
    return run  # type: ignore[return-value]


class PatchError(RuntimeError):
    """A patch's target is missing in the running release."""


def _resolve(path: str) -> tuple[Any, str]:
    """("pkg.module.Class", "attr") for "pkg.module.Class.attr": the owner object and the name."""
    owner_path, attr = path.rsplit(".", 1)
    parts = owner_path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            owner = getattr(owner, name)
        return owner, attr
    raise ImportError(owner_path)


@dataclasses.dataclass(eq=False)
class Patch:
    """One change to another library's state."""

    name: str
    library: str                  # "torch" or "jax": whose release `versions` names
    targets: tuple[str, ...]      # what it changes (dotted names, or a description)
    why: str
    versions: tuple[Minor, Minor]  # first and last release it was verified with
    _apply: Callable[..., Any]    # does the change; returns what `_undo` needs
    _undo: Callable[[Any], None]
    _attrs: tuple[str, ...] = ()  # dotted attributes that must exist (the guard)
    _state: Any = dataclasses.field(default=_UNSET, repr=False)
    _warned: bool = dataclasses.field(default=False, repr=False)

    @property
    def applied(self) -> bool:
        return self._state is not _UNSET

    def apply(self, *args, **kwargs) -> None:
        """Make the change (once: applying an applied patch does nothing)."""
        if self.applied:
            return
        self._guard()
        self._state = self._apply(*args, **kwargs)

    def undo(self) -> None:
        """Restore what `apply` changed (nothing when not applied)."""
        if self.applied:
            state, self._state = self._state, _UNSET
            self._undo(state)

    def _guard(self) -> None:
        version = (torch_version() if self.library == "torch" else jax.__version__)
        for path in self._attrs:
            try:
                owner, attr = _resolve(path)
                getattr(owner, attr)
            except (ImportError, AttributeError):
                raise PatchError(
                    f"lazyxla: patch {self.name!r} cannot be applied: {path} does not exist in "
                    f"{self.library} {version}. lazyxla needs it because {self.why} Handle the release "
                    "in lazyxla/patches, or install a release lazyxla was verified with "
                    f"({_range(self.versions)}).") from None
        if not self._warned:
            self._warned = warn_if_unverified(
                self.library, version, self.versions,
                f"lazyxla's patch {self.name!r} ({', '.join(self.targets)}) may not fit it.")


def torch_version() -> str:
    return torch.__version__


def _range(versions: tuple[Minor, Minor]) -> str:
    return " to ".join(".".join(map(str, v)) for v in versions)


# --- attribute wrappers ------------------------------------------------------------------

def _wrap(paths: tuple[str, ...], wrappers: dict[str, Callable[[Any], Any]]) -> list:
    """Replace each attribute at `paths` by wrappers[last name](original); the originals."""
    saved = []
    for path in paths:
        owner, attr = _resolve(path)
        original = getattr(owner, attr)
        saved.append((owner, attr, original))
        setattr(owner, attr, wrappers[attr](original))
    return saved


def _restore(saved: list) -> None:
    for owner, attr, original in reversed(saved):
        setattr(owner, attr, original)


def _subclass_test_patch(name: str, modules: tuple[str, ...], when: str) -> Patch:
    paths = tuple(f"{m}.is_traceable_wrapper_subclass" for m in modules)

    def apply(is_plain: Callable[[object], bool]) -> list:
        def wrapper(original):
            def is_traceable_wrapper_subclass(t) -> bool:
                return not is_plain(t) and original(t)
            return is_traceable_wrapper_subclass
        return _wrap(paths, {"is_traceable_wrapper_subclass": wrapper})

    return Patch(
        name, "torch", paths,
        "a lazy tensor is a traceable wrapper subclass with no inner tensors, which these modules "
        "would flatten (to nothing) or take for an already-fake tensor; to them it must be a plain "
        f"tensor of the lazyxla device (dynamo/plain.py). Applied {when}.",
        TORCH_VERIFIED, apply, _restore, paths)


_GUARDS = ("torch._dynamo.guards.GuardBuilder.TENSOR_SUBCLASS_METADATA_MATCH",
           "torch._dynamo.guards.GuardBuilder.EQUALS_MATCH")


def _apply_plain_tensor_guards(is_plain: Callable[[object], bool]) -> list:
    from torch._dynamo.source import SubclassAttrListSource   # deferred: dynamo imports lazily

    def metadata_match(original):
        def TENSOR_SUBCLASS_METADATA_MATCH(self, guard, *args, **kwargs):
            if is_plain(self.get(guard)):
                return   # its flatten context is (dtype, device), which TENSOR_MATCH checks in C++
            return original(self, guard, *args, **kwargs)
        return TENSOR_SUBCLASS_METADATA_MATCH

    def equals_match(original):
        def EQUALS_MATCH(self, guard, *args, **kwargs):
            source = guard.originating_source
            if isinstance(source, SubclassAttrListSource) and is_plain(self.get(source.base)):
                return   # its inner tensors: none, whatever the tensor
            return original(self, guard, *args, **kwargs)
        return EQUALS_MATCH
    return _wrap(_GUARDS, {"TENSOR_SUBCLASS_METADATA_MATCH": metadata_match, "EQUALS_MATCH": equals_match})


_GLOO = "jax._src.xla_bridge._jax.make_gloo_tcp_collectives"


def _apply_gloo_address(hostname: str) -> list:
    def wrapper(original):
        def make_gloo_tcp_collectives(*args, **kwargs):
            if kwargs.get("hostname") is None and kwargs.get("interface") is None:
                kwargs["hostname"] = hostname
            return original(*args, **kwargs)
        return make_gloo_tcp_collectives
    return _wrap((_GLOO,), {"make_gloo_tcp_collectives": wrapper})


# --- the records -----------------------------------------------------------------------------

_OPTIMIZER_VARIABLE = "torch._dynamo.variables.optimizer.OptimizerVariable"
_OPTIMIZER_ATTRS = tuple(f"{_OPTIMIZER_VARIABLE}.{a}" for a in ("_set_capturable", "call_method"))


def _apply_optimizer_variable(**wrappers: Callable[[Any], Any]) -> list:
    return _wrap(_OPTIMIZER_ATTRS, wrappers)


# torch.optim's list, and torch.utils' (clip_grad_norm_ and clip_grad_value_ read it)
_FOREACH = ("torch.optim.optimizer._foreach_supported_types", "torch.utils._foreach_utils._foreach_supported_types")
_CHECKPOINT = "torch.utils.checkpoint.checkpoint"


def _apply_foreach(tensor_type: type) -> tuple:
    """Add `tensor_type` to each list that lacks it; the lists it was added to."""
    added = []
    for path in _FOREACH:
        supported = getattr(*_resolve(path))
        if tensor_type not in supported:
            supported.append(tensor_type)
            added.append(path)
    return (tensor_type, tuple(added))


def _undo_foreach(state: tuple) -> None:
    tensor_type, added = state
    for path in added:
        supported = getattr(*_resolve(path))
        if tensor_type in supported:
            supported.remove(tensor_type)


def _apply_step_hooks(pre: Callable, post: Callable) -> tuple:
    return (torch_optimizer.register_optimizer_step_pre_hook(pre),
            torch_optimizer.register_optimizer_step_post_hook(post))


def _undo_hooks(handles: tuple) -> None:
    for handle in handles:
        handle.remove()


def _apply_accelerator_hooks(wrappers: dict[str, Callable[[Any], Any]], names: tuple[str, ...]) -> list:
    return _wrap(tuple(f"torch._C.{name}" for name in names), wrappers)


def _apply_cpu_pin_memory(kernel: Callable) -> Any:
    library = torch.library.Library("aten", "IMPL")
    library.impl("_pin_memory", kernel, "CPU")
    return library


def _undo_library(library: Any) -> None:
    library._destroy()


def _apply_meta_path(finder: object) -> object:
    sys.meta_path.insert(0, finder)
    return finder


def _undo_meta_path(finder: object) -> None:
    if finder in sys.meta_path:   # a one-shot finder may have removed itself
        sys.meta_path.remove(finder)


def _apply_recompile_logs() -> None:
    torch._logging.set_logs(recompiles=True)


def _undo_recompile_logs(_state) -> None:
    torch._logging.set_logs()


def _jax_options(values: dict) -> dict:
    saved = {name: getattr(jax.config, name) for name in values}
    for name, value in values.items():
        jax.config.update(name, value)
    return saved


def _undo_jax_options(saved: dict) -> None:
    for name, value in saved.items():
        jax.config.update(name, value)


def _apply_persistent_cache(directory: str) -> dict:
    return _jax_options({"jax_compilation_cache_dir": directory,
                         "jax_persistent_cache_min_compile_time_secs": 0.0,
                         "jax_persistent_cache_min_entry_size_bytes": 0})


def _apply_listener(listener: Callable) -> Callable:
    jax.monitoring.register_event_listener(listener)
    return listener


def _undo_listener(listener: Callable) -> None:
    jax.monitoring.unregister_event_listener(listener)


PATCHES: tuple[Patch, ...] = (
    _subclass_test_patch("fake_tensor_subclass_test",
                         ("torch._subclasses.meta_utils", "torch._subclasses.fake_tensor"),
                         "at `import lazyxla`"),
    _subclass_test_patch("aot_autograd_subclass_test",
                         ("torch._functorch._aot_autograd.frontend_utils",
                          "torch._functorch._aot_autograd.runtime_wrappers"),
                         "when the dynamo backend is first used (importing these modules earlier "
                         "re-enters torch's own imports)"),
    Patch("dynamo_plain_tensor_guards", "torch", _GUARDS,
          "dynamo guards a traceable wrapper subclass's flatten context and inner-attribute list "
          "with two Python checks per tensor per call (a compiled AdamW step has 265 lazy tensors "
          "among its inputs); a lazy tensor's context is its dtype and device, which dynamo's C++ "
          "tensor guard checks already, and its list is always empty. Applied when torch._dynamo "
          "is imported.",
          TORCH_VERIFIED, _apply_plain_tensor_guards, _restore, _GUARDS),
    Patch("dynamo_optimizer_variable", "torch", _OPTIMIZER_ATTRS,
          "compiled optimizer steps must keep their step counters on the device (dynamo sets "
          "capturable for CUDA/XPU parameters only) and materialise new optimizer state at once, "
          "or step 1 compiles a second step graph (dynamo/optimizer.py).",
          TORCH_VERIFIED, _apply_optimizer_variable, _restore, _OPTIMIZER_ATTRS),
    Patch("foreach_lazy_tensor", "torch", _FOREACH,
          "torch.optim and torch.nn.utils.clip_grad_norm_ default to their multi-tensor paths only "
          "for the exact tensor types listed; lazy parameters would take the per-parameter loop, "
          "one dispatch per op per parameter (frontend/optim.py).",
          TORCH_VERIFIED, _apply_foreach, _undo_foreach, _FOREACH),
    Patch("optimizer_step_hooks", "torch",
          ("torch.optim.optimizer global step pre/post hooks",),
          "state created inside an optimizer step is materialised at once, so warm-up compiles "
          "one step graph instead of two; the hooks mark the step (frontend/optim.py), and the "
          "post hook ends a training step: an implied step barrier (sync/barriers.py).",
          TORCH_VERIFIED, _apply_step_hooks, _undo_hooks,
          ("torch.optim.optimizer.register_optimizer_step_pre_hook",
           "torch.optim.optimizer.register_optimizer_step_post_hook")),
    Patch("torch_accelerator_hooks", "torch",
          ("torch._C._accelerator_* (allocator, memory stats and info, synchronize: those the "
           "release has)",),
          "torch takes the renamed PrivateUse1 backend for the process's accelerator and answers "
          "torch.accelerator.empty_cache / memory_stats / synchronize through C++ allocator and "
          "guard hooks that a Python backend cannot register; while lazyxla is the current "
          "accelerator they answer from its buffer ledger (frontend/accelerator.py).",
          TORCH_VERIFIED, _apply_accelerator_hooks, _restore, ("torch._C._get_accelerator",)),
    Patch("cpu_pin_memory", "torch", ("aten::_pin_memory, CPU kernel",),
          "Tensor.pin_memory() (DataLoader(pin_memory=True), Trainer's default) asks the current "
          "accelerator's hooks for a pinned allocator, which a Python backend cannot provide; "
          "for lazyxla a pin is a host copy, for another device torch's own kernel runs "
          "(frontend/accelerator.py).",
          TORCH_VERIFIED, _apply_cpu_pin_memory, _undo_library, ("torch.ops.aten._pin_memory.default",)),
    Patch("dynamo_import_hook", "torch", ("sys.meta_path (a one-shot finder for torch._dynamo)",),
          "importing dynamo costs ~1.1 s, so the backend is registered when something imports "
          "torch._dynamo, not at `import lazyxla` (dynamo/__init__.py).",
          TORCH_VERIFIED, _apply_meta_path, _undo_meta_path),
    Patch("deferred_dynamo_disable", "torch",
          ("torch._compile._disable_dynamo: the cached wrapper of each reference and meta kernel, "
           "decomposition and optimizer method it wraps",),
          "the first call of a function torch wrapped with `_disable_dynamo` imports torch._dynamo "
          "(0.4-0.7 s); lazyxla's first elementwise op runs such a meta kernel, so every process "
          "paid it in its first op. Until dynamo is imported there is no frame hook to disable, "
          "so the functions run directly; the import hook (dynamo/__init__.py) undoes this.",
          TORCH_VERIFIED, dynamo_deferral.apply, dynamo_deferral.undo,
          ("torch._compile._disable_dynamo", "torch._decomp.meta_table")),
    Patch("dynamo_recompile_logs", "torch", ("torch._logging: the recompiles artifact",),
          "LAZYXLA_EXPLAIN_RECOMPILES=1 also has dynamo log which guard failed; undo resets "
          "torch's logging to its defaults.",
          TORCH_VERIFIED, _apply_recompile_logs, _undo_recompile_logs, ("torch._logging.set_logs",)),
    Patch("torch_checkpoint", "torch", (_CHECKPOINT,),
          "on lazyxla, forward and backward are one XLA graph, where XLA merges a checkpointed "
          "region's re-run back into the forward and the activations are kept after all; the "
          "replacement keeps the re-run apart for lazy tensors and calls torch's function "
          "(lazyxla/recompute.py).",
          TORCH_VERIFIED, lambda replacement: _wrap((_CHECKPOINT,), {"checkpoint": lambda _: replacement}),
          _restore, (_CHECKPOINT,)),
    Patch("jax_persistent_cache", "jax",
          ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
           "jax_persistent_cache_min_entry_size_bytes"),
          "compiled executables are kept on disk in lazyxla's cache directory, every one of them "
          "(lazyxla's graphs are small and many) (compile/disk_cache.py).",
          JAX_VERIFIED, _apply_persistent_cache, _undo_jax_options),
    Patch("jax_cache_listener", "jax", ("jax.monitoring event listeners",),
          "counts persistent-cache hits (PersistentCacheHit) and prunes the cache directory as it "
          "grows (compile/disk_cache.py).",
          JAX_VERIFIED, _apply_listener, _undo_listener,
          ("jax.monitoring.register_event_listener", "jax.monitoring.unregister_event_listener")),
    Patch("jax_gloo_address", "jax", (_GLOO,),
          "gloo advertises the address its host name resolves to, often 127.0.0.1 (/etc/hosts), "
          "which other machines (or network namespaces) cannot reach; lx.distributed.initialize "
          "passes the local address that routes to the coordinator.",
          JAX_VERIFIED, _apply_gloo_address, _restore, (_GLOO,)),
    Patch("jax_cpu_collectives", "jax", ("jax_cpu_collectives_implementation",),
          "multi-process CPU runs need collectives between processes, which JAX's CPU client "
          "has only with gloo (lx.distributed.initialize).",
          JAX_VERIFIED, lambda: _jax_options({"jax_cpu_collectives_implementation": "gloo"}),
          _undo_jax_options),
)
_BY_NAME = {p.name: p for p in PATCHES}


def get(name: str) -> Patch:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"lazyxla: no patch named {name!r}; patches: {', '.join(_BY_NAME)}") from None


def apply(name: str, *args, **kwargs) -> None:
    """Apply the patch `name` (see PATCHES) with the arguments its `_apply` takes."""
    get(name).apply(*args, **kwargs)


def undo(name: str) -> None:
    get(name).undo()


def applied() -> list[str]:
    """Names of the patches in force, in PATCHES order."""
    return [p.name for p in PATCHES if p.applied]


def undo_all() -> None:
    """Undo every applied patch, last first (lazyxla stops working on the lazyxla device)."""
    for p in reversed(PATCHES):
        p.undo()


def report() -> str:
    """One line per patch: in force or not, the library releases, what and why."""
    lines = []
    for p in PATCHES:
        mark = "applied" if p.applied else "off    "
        lines.append(f"{mark} {p.name} ({p.library} {_range(p.versions)}): {', '.join(p.targets)}. {p.why}")
    return "\n".join(lines)
