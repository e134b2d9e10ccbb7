"""On the TPU: confirm the forms lazyxla gives the TPU (issue 45, items 2 and 4), and time
what 64-bit integers and each matmul precision cost a W2 step.

    . scripts/tpu/setup.sh && python3 scripts/tpu/lowering_check.py [--steps N] [--only SECTION,...]

Sections: barrier (optimization barriers over each dtype, the 10-node graph the TPU refused,
activation checkpointing), complex (complex Python scalars with complex64 tensors: the TPU
compiler aborted the process on their complex128 -> complex64 convert), long (W2 with int64
held as int32: same losses, how many 64-bit integer instructions, ms per step with and
without), precision (torch.set_float32_matmul_precision / lx.set_matmul_precision / compat's
default: the level reaches the products, their error against float64, W2 ms per step at each
level). Prints one PASS or FAIL line per check and INFO lines for figures; exits 1 when a
check failed. Needs torch, JAX and lazyxla only; runs on CPU too (the figures then say little).
"""
from __future__ import annotations

import argparse
import copy
import re
import sys
import time
import traceback
from typing import Callable

import torch

import lazyxla as lx
from lazyxla import workloads

FAILED: list = []


def check(name: str, fn: Callable[[], str]) -> None:
    """Run one check: PASS with what it returned, or FAIL with its error's first line."""
    try:
        detail = fn()
        print(f"PASS {name}{': ' + detail if detail else ''}", flush=True)
    except Exception as e:   # noqa: BLE001  (every failure is a finding to print)
        FAILED.append(name)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        print(f"FAIL {name}: {type(e).__name__}: {first}", flush=True)
        traceback.print_exc(limit=3, file=sys.stderr)


def info(text: str) -> None:
    print(f"INFO {text}", flush=True)


def require(ok: bool, why: str) -> str:
    if not ok:
        raise AssertionError(why)
    return ""


def close(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> str:
    torch.testing.assert_close(got.cpu(), expected, rtol=rtol, atol=atol)
    return ""


# -- barrier -------------------------------------------------------------------------------

def _barrier_over(dtype: torch.dtype) -> str:
    dev = lx.device()
    ca = torch.arange(12).reshape(3, 4).to(dtype)
    cb = (torch.arange(12).reshape(3, 4) % 2).to(dtype)
    a, b = ca.to(dev), cb.to(dev)
    lx.sync()
    a.logical_not_() if dtype is torch.bool else a.add_(1)
    lx.optimization_barrier_([a, b])
    a.logical_or_(b) if dtype is torch.bool else a.mul_(b)
    expected = ca.logical_not().logical_or(cb) if dtype is torch.bool else (ca + 1) * cb
    return close(a, expected, 0, 0)


def _ten_node_graph() -> str:
    """tests/test_aliasing_ltc.py::test_optimization_barrier_keeps_aliasing, the graph the
    TPU refused (2026-12-05): two donated inputs, a barrier over both, one output straight
    from the barrier."""
    dev = lx.device()
    ca, cb = torch.rand(3, 4), torch.rand(3, 4)
    a, b = ca.to(dev), cb.to(dev)
    lx.sync()
    a.add_(1)
    b.mul_(2)
    lx.optimization_barrier_([a, b])
    a.mul_(b)
    lx.sync()
    close(b, cb * 2, 1e-6, 1e-6)
    return close(a, (ca + 1) * (cb * 2), 1e-6, 1e-6)


def _checkpointed_w2() -> str:
    """W2 with torch.utils.checkpoint around each block: loss and gradients as without it
    (both on the TPU, at "highest"), and the step's temporaries with and without."""
    temps, results = [], []
    with lx_precision("highest"):
        for checkpoint in (False, True):
            torch.manual_seed(0)
            model = workloads.GPT(workloads.GPTConfig(checkpoint=checkpoint)).to(lx.device())
            wl = workloads.make("gpt", batch=2)
            loss = wl.loss(model, wl.inputs.to(lx.device()), wl.targets.to(lx.device()))
            loss.backward()
            lx.sync()
            temps.append(lx.debug.memory_report().last_graph.get("temp_size_in_bytes", 0))
            results.append([loss.detach().cpu()] + [p.grad.cpu() for p in model.parameters()])
    for plain, ckpt in zip(*results):
        torch.testing.assert_close(ckpt, plain, rtol=1e-4, atol=1e-5)
    return f"step temporaries {temps[0] / 2**20:.1f} MiB without, {temps[1] / 2**20:.1f} MiB with"


def barrier_section(args) -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8,
                  torch.bool, torch.float64):
        check(f"barrier over {dtype}", lambda d=dtype: _barrier_over(d))
    check("barrier: the 10-node graph of test_optimization_barrier_keeps_aliasing", _ten_node_graph)
    check("barrier: W2 with activation checkpointing equals W2 without", _checkpointed_w2)


# -- complex -------------------------------------------------------------------------------

def complex_section(args) -> None:
    z = torch.randn(3, 4, dtype=torch.complex64)
    cases = {
        "complex64 * 2j": lambda t: t * 2j,
        "full_like(complex64, 1.5-2j)": lambda t: torch.full_like(t, 1.5 - 2j),
        "complex64 + (1+1j), then abs": lambda t: (t + (1 + 1j)).abs(),
        "float32 * 1j (complex64 result)": lambda t: t.real * 1j,
    }
    for name, fn in cases.items():
        check(f"complex: {name}", lambda f=fn: close(f(z.to(lx.device())), f(z), 1e-5, 1e-5))


# -- long ----------------------------------------------------------------------------------

def s64_instructions(hlo: str) -> int:
    """HLO instructions with a 64-bit integer array (s64[..]/u64[..], not scalars)."""
    return sum(1 for line in hlo.splitlines() if re.search(r"[su]64\[\d", line))


def w2_step_figures(steps: int) -> tuple:
    """W2 (lazyxla/workloads.py) trained `steps` steps from the same start: its losses,
    its ms per step after two warm-up steps, and the 64-bit integer instructions and all
    instructions of its forward and backward as lowered."""
    wl = workloads.make("gpt")
    model = copy.deepcopy(wl.model).to(lx.device())
    opt = wl.optimizer(model.parameters())
    x, y = wl.inputs.to(lx.device()), wl.targets.to(lx.device())
    losses, hlo, start = [], "", 0.0
    for step in range(steps + 2):
        if step == 2:
            lx.sync(wait=True)
            start = time.perf_counter()
        opt.zero_grad()
        loss = wl.loss(model, x, y)
        loss.backward()
        if step == 1:
            hlo = lx.debug.hlo_text()
        opt.step()
        losses.append(loss)
    lx.sync(wait=True)
    ms = (time.perf_counter() - start) * 1000 / steps
    instructions = sum(1 for line in hlo.splitlines() if " = " in line)
    return [float(v) for v in losses], ms, s64_instructions(hlo), instructions


def long_section(args) -> None:
    previous = lx.storage_dtypes()
    figures = {}
    try:
        for name, policy in (("int64", None), ("int64 held as int32", {torch.int64: torch.int32})):
            lx.set_storage_dtypes(policy)
            figures[name] = w2_step_figures(args.steps)
            losses, ms, s64, total = figures[name]
            info(f"W2 step, {name}: {ms:.2f} ms per step, {s64} of {total} HLO instructions of its "
                 f"forward and backward with 64-bit integer arrays")
    finally:
        lx.set_storage_dtypes(previous)
    wide, narrow = figures["int64"], figures["int64 held as int32"]
    check("long: W2 losses with int64 held as int32 equal those with int64",
          lambda: close(torch.tensor(narrow[0]), torch.tensor(wide[0]), 1e-5, 1e-5))
    check("long: no 64-bit integer arrays left with int64 held as int32",
          lambda: require(narrow[2] == 0, f"{narrow[2]} left"))


# -- precision -----------------------------------------------------------------------------

class lx_precision:
    """lx.set_matmul_precision(level) for a block, the previous setting back after."""

    def __init__(self, level) -> None:
        self.level = level

    def __enter__(self) -> None:
        self.previous = lx.set_matmul_precision(self.level)

    def __exit__(self, *exc) -> None:
        lx.set_matmul_precision(self.previous)


def _product_error(level_expected: str) -> float:
    """Relative error of a float32 matmul and a conv2d on the device against float64."""
    assert lx.matmul_precision() == level_expected, lx.matmul_precision()
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    x, w = torch.randn(2, 16, 16, 16), torch.randn(16, 16, 3, 3)
    dev = lx.device()
    got = [(a.to(dev) @ b.to(dev)).cpu(), torch.nn.functional.conv2d(x.to(dev), w.to(dev)).cpu()]
    exact = [a.double() @ b.double(), torch.nn.functional.conv2d(x.double(), w.double())]
    return max(float((g.double() - e).abs().max() / e.abs().max()) for g, e in zip(got, exact))


def precision_section(args) -> None:
    torch_level = torch.get_float32_matmul_precision()
    errors = {}
    try:
        with lx_precision(None):   # follow torch's switch
            for torch_name, level in (("highest", "highest"), ("high", "high"), ("medium", "default")):
                torch.set_float32_matmul_precision(torch_name)
                check(f"precision: torch '{torch_name}' -> lazyxla '{level}'",
                      lambda lv=level: f"relative error {errors.setdefault(lv, _product_error(lv)):.2e}")
            torch.set_float32_matmul_precision("medium")
            with lx_precision("highest"):
                check("precision: lx.set_matmul_precision wins over torch's switch",
                      lambda: f"relative error {_product_error('highest'):.2e}")
        if lx.platform() == "tpu" and len(errors) == 3:
            check("precision: highest is float32-exact (< 1e-5), default is bf16-coarse (> 1e-4)",
                  lambda: require(errors["highest"] < 1e-5 and errors["default"] > 1e-4, str(errors)))
        for level in ("highest", "high", "default"):
            with lx_precision(level):
                losses, ms, _, _ = w2_step_figures(args.steps)
                info(f"W2 step at '{level}': {ms:.2f} ms per step, last loss {losses[-1]:.5f}")
    finally:
        torch.set_float32_matmul_precision(torch_level)
    check("precision: under compat the level starts at PyTorch/XLA's 'default'", _compat_default)


def _compat_default() -> str:
    import lazyxla.compat as compat
    compat.install()
    try:
        import torch_xla.backends as backends
        level = backends.get_mat_mul_precision()
        assert level == lx.matmul_precision() == "default", level
        return ""
    finally:
        compat.uninstall()


SECTIONS = {"barrier": barrier_section, "complex": complex_section, "long": long_section,
            "precision": precision_section}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed W2 steps per configuration")
    parser.add_argument("--only", default=",".join(SECTIONS), help="sections to run, comma-separated")
    args = parser.parse_args()
    info(f"lazyxla on {lx.platform()}, torch {torch.__version__}")
    for name in args.only.split(","):
        SECTIONS[name.strip()](args)
    print(f"{'FAIL' if FAILED else 'PASS'} all: {len(FAILED)} check(s) failed" +
          (f" ({'; '.join(FAILED)})" if FAILED else ""), flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
