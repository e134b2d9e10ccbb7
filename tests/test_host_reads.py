"""Host reads of views copy only the view (issue #21), and compile no step graph (#12).

The bytes moved are lx.metrics' `InboundData` (every device-to-host copy adds its
bytes), which does not depend on the host; the peak-RSS check runs in a subprocess.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import lazyxla as lx
from lazyxla import metrics
from helpers import child_env

MB = 2**20


def _inbound() -> int:
    data = metrics.metric_data("InboundData")
    return 0 if data is None else int(data[1])


def _no_step_graph() -> None:
    assert metrics.counter_value("UncachedCompile") is None and metrics.counter_value("CachedCompile") is None
    assert metrics.metric_data("InputOutputAliasCount") is None and metrics.metric_data("ExecuteTime") is None


def test_reads_of_views_of_a_256mb_tensor_move_only_the_view(dev):
    base = torch.arange(256 * MB // 4, dtype=torch.float32)
    w = base.to(dev)
    w2 = w.view(16384, 4096)
    lx.sync(wait=True)
    metrics.clear_all()
    reads = [
        (lambda: w[5].item(), lambda: base[5].item(), 4),
        (lambda: w[:10].cpu(), lambda: base[:10], 40),
        (lambda: w2[7].cpu(), lambda: base.view(16384, 4096)[7], 4096 * 4),        # a row of a 2-d view
        (lambda: w2.t()[3].cpu(), lambda: base.view(16384, 4096).t()[3], 16384 * 4),  # a row of a transposed view
        (lambda: w2[2:4, 1:3].tolist(), lambda: base.view(16384, 4096)[2:4, 1:3].tolist(), 16),
        (lambda: w2.t()[5][::1000].cpu(), lambda: base.view(16384, 4096).t()[5][::1000], 17 * 4),
        (lambda: w.as_strided((3, 2), (7, 1), 11).cpu(), lambda: base.as_strided((3, 2), (7, 1), 11), 24),
        (lambda: w2[1:3].unsqueeze(0).permute(2, 0, 1)[10].cpu(),
         lambda: base.view(16384, 4096)[1:3].unsqueeze(0).permute(2, 0, 1)[10], 8),
    ]
    for read, eager, nbytes in reads:
        before = _inbound()
        got = read()
        want = eager()
        if isinstance(want, torch.Tensor):
            assert got.equal(want)
        else:
            assert got == want
        assert _inbound() - before == nbytes, (nbytes, _inbound() - before)
    _no_step_graph()
    assert repr(w2[1, :3]).startswith("tensor([4096., 4097., 4098.]")


def test_view_reads_compile_one_program_per_view_shape(dev):
    from lazyxla.sync import view_read
    w = torch.randn(64, 32).to(dev)
    lx.sync(wait=True)
    w[0].cpu()
    before = view_read._gather.cache_info().currsize
    rows = [w[i].cpu() for i in range(1, 64)]
    assert view_read._gather.cache_info().currsize == before   # offsets are operands, not constants
    torch.testing.assert_close(torch.stack(rows), w.cpu()[1:])


def test_views_that_are_no_strided_window_are_replayed_on_the_device(dev):
    base = torch.randn(4, 6, dtype=torch.complex64)
    c = base.to(dev)
    y = torch.randn(3, 4).t().clone().to(dev)     # device base with non-contiguous strides
    lx.sync(wait=True)
    metrics.clear_all()
    cases = [(lambda: torch.view_as_real(c[2]).cpu(), torch.view_as_real(base[2]), 6 * 8),
             (lambda: y.t().view(-1)[:5].cpu(), y.cpu().t().reshape(-1)[:5], 20),
             (lambda: torch.view_as_real(c.t())[1].cpu(), torch.view_as_real(base.t())[1], 4 * 8)]
    for read, want, nbytes in cases:
        before = _inbound()
        got = read()
        assert got.equal(want)
        assert _inbound() - before == nbytes
    _no_step_graph()


def test_view_read_of_a_donated_base_still_raises(dev):
    a = torch.ones(3, 4).to(dev)
    v = a[1]
    lx.set_buffer_donation(a)
    b = a * 2
    lx.sync()
    with pytest.raises(lx.DonatedBufferError):
        v.cpu()
    assert b[1].tolist() == [2.0] * 4


_RSS_CHILD = textwrap.dedent("""
    import torch, lazyxla as lx
    from lazyxla.bench import measure as M
    w = torch.ones(256 * 2**20 // 4).to(lx.device())
    w2 = w.view(16384, 4096)
    lx.sync(wait=True)
    w[5].item(); w2.t()[3].cpu()                  # warm: compile the gathers once
    M.reset_peak()
    start = M.peak_rss_mb()
    vals = [w[5].item(), float(w[:10].cpu().sum()), float(w2[7].sum()), float(w2.t()[3].cpu().sum())]
    print(M.peak_rss_mb() - start, vals)
""")


def test_view_reads_keep_peak_rss_flat():
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD], capture_output=True, text=True, timeout=300,
                         check=True, env=child_env())
    delta, _ = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert float(delta) < 48, out.stdout
