"""The precision of float32 matmuls and convolutions (compile/precision.py): torch's own
switch, `torch.set_float32_matmul_precision`, decides until `lx.set_matmul_precision` is
given a level; the level reaches XLA's dot and convolution and the graph key. XLA:CPU
computes float32 the same at every level, so values equal eager's at each."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import lazyxla as lx
from helpers import assert_close


@pytest.fixture
def restore_precision():
    torch_level = torch.get_float32_matmul_precision()
    previous = lx.set_matmul_precision(None)
    yield
    torch.set_float32_matmul_precision(torch_level)
    lx.set_matmul_precision(previous)


def _precisions(text: str, op: str) -> list:
    """The operand precision of each `op` in HLO `text` (XLA omits DEFAULT's)."""
    return [m.group(1) if m else "default"
            for m in (re.search(r"operand_precision=\{(\w+),", line)
                      for line in text.splitlines() if f" {op}(" in line)]


def _compiles() -> int:
    return lx.metrics.counter_value("UncachedCompile") or 0


@pytest.mark.parametrize("torch_level, level", [("highest", "highest"), ("high", "high"), ("medium", "default")])
def test_torch_switch_sets_the_level_of_matmuls_and_convolutions(dev, restore_precision, torch_level, level):
    torch.set_float32_matmul_precision(torch_level)
    assert lx.matmul_precision() == level
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    c = a.to(dev) @ b.to(dev)
    y = F.conv2d(x.to(dev), w.to(dev))
    text = lx.debug.hlo_text([c, y])
    assert _precisions(text, "dot") == [level] and _precisions(text, "convolution") == [level]
    assert_close(c, a @ b) and assert_close(y, F.conv2d(x, w))


@pytest.mark.parametrize("level", ["highest", "high", "default"])
def test_attention_through_jax_computes_at_the_level(dev, restore_precision, level):
    # Bug: scaled_dot_product_attention, lowered by jax.nn.dot_product_attention (which leaves
    # the precision to JAX's default), ran its two products at DEFAULT at lazyxla's default
    # level "highest": one bf16 pass on a TPU, every BERT/GPT-2 attention of a Trainer run.
    lx.set_matmul_precision(level)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    out = F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), is_causal=True)
    assert _precisions(lx.debug.hlo_text([out]), "dot") == [level, level]
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_lazyxla_level_wins_over_torch_until_set_to_none(dev, restore_precision):
    torch.set_float32_matmul_precision("medium")
    assert lx.set_matmul_precision("highest") is None   # torch's switch was followed
    assert lx.matmul_precision() == "highest"
    torch.set_float32_matmul_precision("high")           # a CUDA setting: lazyxla's level stays
    a = torch.randn(4, 4).to(dev)
    assert _precisions(lx.debug.hlo_text([a @ a]), "dot") == ["highest"]
    assert lx.set_matmul_precision(None) == "highest"
    assert lx.matmul_precision() == "high"
    assert _precisions(lx.debug.hlo_text([a @ a]), "dot") == ["high"]


def test_each_level_compiles_once_and_an_unchanged_level_never_again(dev, restore_precision):
    a, b = torch.randn(7, 5).to(dev), torch.randn(5, 3).to(dev)   # shapes no other test compiles
    lx.sync()
    counts = []
    for torch_level in ("highest", "highest", "medium", "medium", "highest", "medium"):
        torch.set_float32_matmul_precision(torch_level)
        before = _compiles()
        (a @ b).cpu()
        counts.append(_compiles() - before)
    assert counts == [1, 0, 1, 0, 0, 0]   # one program per level; a changed level is another key


def test_under_compat_upstream_default_and_torch_switch_not_followed(dev, restore_precision, torch_xla):
    import torch_xla.backends as backends
    assert backends.get_mat_mul_precision() == lx.matmul_precision() == "default"
    torch.set_float32_matmul_precision("highest")   # upstream reads only its own switch
    assert lx.matmul_precision() == "default"
    backends.set_mat_mul_precision("highest")
    a = torch.randn(4, 4).to(dev)
    assert _precisions(lx.debug.hlo_text([a @ a]), "dot") == ["highest"]
    backends.set_mat_mul_precision("default")


def test_compat_keeps_a_level_chosen_before_it(restore_precision):
    import lazyxla.compat as compat
    from lazyxla.compat.torch_xla import backends
    lx.set_matmul_precision("high")
    compat.install()
    try:
        backends.install()   # what `import torch_xla` runs
        assert lx.matmul_precision() == "high"
    finally:
        compat.uninstall()
    assert lx.matmul_precision() == "high"
