"""lazyxla/patches: every change to torch's or JAX's state is a listed, guarded, undoable
patch; JAX's 64-bit mode is scoped to lazyxla's own work."""
from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import pytest
import torch

import lazyxla as lx
from lazyxla import patches
from lazyxla.frontend.tensor import LazyTensor
from helpers import child_env, skip_if_narrowed

PACKAGE = pathlib.Path(lx.__file__).parent


def test_users_jax_keeps_its_defaults_after_a_training_step(dev):
    model = torch.nn.Linear(4, 2).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(3, 4).to(dev)).sum().backward()
    opt.step()
    lx.sync(wait=True)
    assert not jax.config.jax_enable_x64
    assert jnp.ones(2).dtype == jnp.float32
    assert jnp.arange(3).dtype == jnp.int32


def test_lazyxla_int64_and_float64_stay_exact(dev):
    skip_if_narrowed(torch.int64, torch.float64)
    big = torch.tensor([2**40 + 1, -(2**62), 7], dtype=torch.int64)
    fine = torch.tensor([1 + 2**-40, 1e300, -2.5], dtype=torch.float64)
    b, f = big.to(dev), fine.to(dev)
    assert torch.equal((b * 2 + 1).cpu(), big * 2 + 1)
    assert torch.equal((f * 0.5).cpu(), fine * 0.5)
    assert torch.equal(b[1:].cpu(), big[1:])                    # a host read of a view
    assert torch.equal(torch.arange(5, device=dev).cpu(), torch.arange(5))
    assert (b.sum()).item() == int(big.sum())
    assert jnp.ones(2).dtype == jnp.float32


def test_x64_is_scoped_to_the_body():
    with patches.in_x64():
        assert jnp.arange(3).dtype == jnp.int64
    assert jnp.arange(3).dtype == jnp.int32


def _calls_outside_patches(predicate) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("patches", "compat"):
            continue   # compat: the opt-in torch_xla finder, removed by lazyxla.compat.uninstall()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and predicate(ast.unparse(node.func)):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node.func)}")
    return found


def test_only_patches_changes_jax_or_torch_state():
    changes = ("jax.config.update", "jax.enable_x64", "jax.experimental.enable_x64",
               "jax.monitoring.register_event_listener", "sys.meta_path.insert", "sys.meta_path.append",
               "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook", "set_logs")
    offenders = _calls_outside_patches(lambda f: any(f == c or f.endswith("." + c) for c in changes))
    assert not offenders, "make these a Patch in lazyxla/patches:\n" + "\n".join(offenders)


def test_every_patch_says_why_and_for_which_releases():
    names = [p.name for p in patches.PATCHES]
    assert len(names) == len(set(names))
    for p in patches.PATCHES:
        assert p.library in ("torch", "jax") and p.targets and len(p.why) > 40, p.name
        version = torch.__version__ if p.library == "torch" else jax.__version__
        lo, hi = p.versions
        assert lo <= tuple(int(x) for x in version.split("+")[0].split(".")[:2]) <= hi, p.name


def test_import_applies_the_expected_patches():
    import lazyxla.dynamo.backend  # noqa: F401  (the AOT modules are patched at first use)
    applied = set(patches.applied())
    assert {"fake_tensor_subclass_test", "aot_autograd_subclass_test", "dynamo_optimizer_variable",
            "foreach_lazy_tensor", "optimizer_step_hooks", "torch_checkpoint"} <= applied
    assert "jax_cpu_collectives" not in applied       # only lx.distributed.initialize()
    print(patches.report())


def test_compile_stack_sees_a_lazy_tensor_as_plain(dev):
    import lazyxla.dynamo.backend  # noqa: F401
    t = torch.ones(2).to(dev)
    for path in patches.get("fake_tensor_subclass_test").targets + patches.get("aot_autograd_subclass_test").targets:
        module, attr = path.rsplit(".", 1)
        assert getattr(importlib.import_module(module), attr)(t) is False, path


@pytest.mark.parametrize("name", ["fake_tensor_subclass_test", "foreach_lazy_tensor", "optimizer_step_hooks"])
def test_undo_restores_and_apply_again_works(name, dev):
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils
    patch = patches.get(name)
    assert patch.applied
    state = patch._state
    module = importlib.import_module("torch._subclasses.fake_tensor")
    args = {"fake_tensor_subclass_test": (lambda t: type(t) is LazyTensor,),
            "foreach_lazy_tensor": (LazyTensor,),
            "optimizer_step_hooks": (lx.frontend.optim._begin_optimizer_step, lx.frontend.optim._optimizer_step_done)}
    try:
        patch.undo()
        assert not patch.applied and name not in patches.applied()
        if name == "fake_tensor_subclass_test":
            original = state[-1][2]
            assert module.is_traceable_wrapper_subclass is original
            assert original(torch.ones(1).to(dev)) is True     # what torch alone says
        elif name == "foreach_lazy_tensor":
            assert LazyTensor not in optimizer._foreach_supported_types
            assert LazyTensor not in foreach_utils._foreach_supported_types
        else:
            assert lx.frontend.optim._begin_optimizer_step not in optimizer._global_optimizer_pre_hooks.values()
        patch.undo()   # undoing twice does nothing
    finally:
        patch.apply(*args[name])
    assert patch.applied
    if name == "foreach_lazy_tensor":
        assert optimizer._foreach_supported_types.count(LazyTensor) == 1
        assert foreach_utils._foreach_supported_types.count(LazyTensor) == 1
    patch.apply(*args[name])   # applying twice does nothing
    if name == "foreach_lazy_tensor":
        assert optimizer._foreach_supported_types.count(LazyTensor) == 1
        assert foreach_utils._foreach_supported_types.count(LazyTensor) == 1


def test_jax_options_are_restored():
    patch = patches.Patch("probe", "jax", ("jax_cpu_collectives_implementation",), "a test of the undo " * 3,
                          patches.get("jax_cpu_collectives").versions,
                          lambda: patches._jax_options({"jax_persistent_cache_min_compile_time_secs": 7.0}),
                          patches._undo_jax_options)
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    patch.apply()
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 7.0
    patch.undo()
    assert jax.config.jax_persistent_cache_min_compile_time_secs == before


def test_guard_names_a_missing_target():
    patch = patches.Patch("probe", "torch", ("torch.nothing_here",), "a test of the guard " * 3,
                          ((2, 0), (9, 99)), lambda: None, lambda _s: None, ("torch.nothing_here",))
    with pytest.raises(patches.PatchError, match=r"patch 'probe' cannot be applied: torch.nothing_here "
                                                 r"does not exist in torch 2\."):
        patch.apply()
    assert not patch.applied


def test_guard_warns_outside_the_verified_releases():
    patch = patches.Patch("probe", "torch", ("torch.ones",), "a test of the guard " * 3,
                          ((1, 0), (1, 1)), lambda: "state", lambda _s: None, ("torch.ones",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patch.apply()
    assert patch.applied
    assert any("patch 'probe'" in str(w.message) and "outside the range" in str(w.message) for w in caught)


def test_unknown_patch_name():
    with pytest.raises(KeyError, match="no patch named 'nope'; patches: fake_tensor_subclass_test"):
        patches.apply("nope")


def test_dynamo_import_hook_removes_itself():
    hook = patches.get("dynamo_import_hook")
    assert not hook.applied or hook._state in sys.meta_path


_FIRST_OPS_WITHOUT_DYNAMO = textwrap.dedent("""
    import sys, torch
    import lazyxla as lx
    from lazyxla import patches
    x = torch.randn(4, 4)
    y = (torch.neg(x.to(lx.device()) * 0.5 + 1.0) - 0.25).exp()   # meta kernels behind _disable_dynamo
    assert torch.allclose(y.cpu(), (torch.neg(x * 0.5 + 1.0) - 0.25).exp())
    assert "torch._dynamo" not in sys.modules, "a first op imported dynamo"
    wrapped = patches.get("deferred_dynamo_disable")._state
    assert len(wrapped) > 50, len(wrapped)
    compiled = torch.compile(lambda t: t * 2 + 1, backend="lazyxla")   # imports dynamo: the hook undoes
    assert "deferred_dynamo_disable" not in patches.applied()
    assert not any(getattr(vars(fn).get("__dynamo_disable"), "lazyxla_deferred", False) for fn in wrapped)
    assert torch.equal(compiled(y).cpu(), y.cpu() * 2 + 1)
    print("OK")
""")


def test_first_ops_do_not_import_dynamo_until_it_is_used():
    out = subprocess.run([sys.executable, "-c", _FIRST_OPS_WITHOUT_DYNAMO], capture_output=True, text=True,
                         timeout=300, env=child_env(LAZYXLA_CACHE_DIR=""))
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]
