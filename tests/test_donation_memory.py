"""XLA's own memory analysis of the step graph of an in-place update: the donated
input buffer is aliased to the output (docs/memory.md). Peak-memory evidence
belongs to the benchmark suite; this checks the compiled executable."""
from __future__ import annotations

import pytest
import torch

import lazyxla as lx
from lazyxla.compile.cache import clear_cache

N = 16 * 1024 * 1024  # float32: 64 MiB


@pytest.mark.parametrize("aliasing", [True, False], ids=["aliasing_on", "aliasing_off"])
def test_inplace_step_graph_aliases_its_buffer(dev, aliasing):
    clear_cache()
    host = torch.arange(N, dtype=torch.float32).remainder_(1000.0)
    w = host.to(dev)
    nbytes = w.numel() * w.element_size()
    assert nbytes == 64 * 2**20
    lx.set_aliasing(aliasing)
    w.mul_(0.5)
    w.add_(1.0)
    lx.sync()
    report = lx.debug.donation_report()
    assert report.kind == "step barrier"
    assert report.saved_bytes == (nbytes if aliasing else 0)
    # arguments: the tensor plus the packed scalar operands (0.5 and 1.0, a few bytes)
    assert nbytes <= report.memory["argument_size_in_bytes"] < nbytes + 1024
    assert report.memory["output_size_in_bytes"] == nbytes
    assert report.donated_bytes == (nbytes if aliasing else 0)
    assert lx.is_donated(w) is False
    expected = host.mul_(0.5).add_(1.0)
    assert torch.equal(w.cpu(), expected)
