"""Failure handling: injected compile/execution failures are clear and lose nothing;
bad inputs get clear errors at the call (docs/reliability.md)."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import warnings
import weakref

import pytest
import torch

import lazyxla as lx
from lazyxla.compile import cache
from lazyxla.ir.ops import overriding
from lazyxla.sync.api import pending_graphs
from helpers import child_env

aten = torch.ops.aten


def _count(name: str) -> int:
    return lx.metrics.counter_value(name) or 0


def _scenario(dev, shape):
    """a: marked for explicit donation; w: updated in place (automatic donor);
    y: pending computation over both. Returns (a, w, y, expected y)."""
    a = torch.full(shape, 2.0).to(dev)
    assert lx.set_buffer_donation(a)
    w = torch.ones(shape).to(dev)
    w.add_(1)
    y = torch.cosh(a) + w
    expected = torch.cosh(torch.full(shape, 2.0)) + 2
    return a, w, y, expected


def _assert_nothing_lost(a, w, y):
    assert not lx.is_donated(a) and lx.get_buffer_donation(a), "a marked buffer was donated by a failed graph"
    assert not lx.is_donated(w) and not lx.is_donated(y)
    # w and y still hold their pending computation
    assert w._st.value.op != "data" and y._st.value.op != "data"


# -- injected compile / lowering / execution failures ------------------------------------

def test_lowering_failure_raises_once_and_loses_nothing(dev):
    # The rule of docs/reliability.md "Failures stay contained" (tests/test_failed_ops.py has
    # the rest): the step is all or nothing: w, device data before it, keeps its value; y,
    # new and needing the op, carries its error.
    def broken(ctx, *args, **kwargs):
        raise ValueError("injected lowering failure")

    with overriding(aten.cosh.default, "lowering", broken):
        a, w, y, expected = _scenario(dev, (5, 7))
        executed = _count("ExecuteComputation")
        with pytest.raises(lx.LoweringError, match="cosh") as info:
            lx.sync()
        assert "injected lowering failure" in str(info.value) and "donated nothing" in str(info.value)
        assert _count("ExecuteComputation") == executed        # nothing new left that runs without cosh
        assert not lx.is_donated(a) and lx.get_buffer_donation(a), "a marked buffer was donated by a failed graph"
        assert w.tolist() == [[1.0] * 7] * 5                   # its update in the failed step: not applied
        w.add_(1)                                              # the step, again
        expected = torch.cosh(torch.full((5, 7), 2.0)) + 2
        with pytest.raises(lx.LoweringError, match="injected lowering failure"):
            y.cpu()                        # y needed cosh: it carries the error
        other = torch.ones(3, device=dev) * 4
        lx.sync_tensors([other])
        assert other.tolist() == [4.0, 4.0, 4.0]
    lx.sync()                              # nothing raises again
    y = torch.cosh(a) + w                  # computed again, without the broken lowering
    lx.sync()
    assert lx.is_donated(a)  # marked, and the step barrier that ran donated it
    torch.testing.assert_close(y.cpu(), expected)


def test_broken_tensor_deleted_next_step_barrier_works(dev):
    with overriding(aten.cosh.default, "lowering", lambda ctx, *a, **k: 1 / 0):
        x = torch.ones(6, 5).to(dev)
        bad = torch.cosh(x)
        good = x * 3
        with pytest.raises(lx.LoweringError, match="ZeroDivisionError"):
            lx.sync()
        del bad
        lx.sync()
    assert good.sum().item() == 90.0


def test_compile_failure_raises_and_loses_nothing(dev, monkeypatch):
    def fail(graph, donors, *metric):
        raise RuntimeError("RESOURCE_EXHAUSTED: injected compile failure")

    monkeypatch.setattr(cache, "compile_graph", fail)
    a, w, y, expected = _scenario(dev, (5, 8))
    size = cache.cache_size()
    with pytest.raises(RuntimeError, match="injected compile failure") as info:
        lx.sync()
    assert any("was not applied" in n for n in info.value.__notes__)
    assert cache.cache_size() == size, "a failed compile must not be cached"
    _assert_nothing_lost(a, w, y)
    with pytest.raises(RuntimeError, match="injected compile failure"):
        lx.sync_tensors([y], donate_inplace=True)
    _assert_nothing_lost(a, w, y)
    monkeypatch.undo()
    lx.sync()
    torch.testing.assert_close(y.cpu(), expected)
    assert w.tolist() == [[2.0] * 8] * 5


def _flaky_compile(monkeypatch, failures: int, consume_donors: bool = False):
    """compile_graph whose executables fail their next `failures` calls."""
    real = cache.compile_graph
    state = {"left": failures}

    def compile_graph(graph, donors, *metric):
        exe = real(graph, donors, *metric)
        call = exe.call

        def flaky(*args):
            if state["left"] > 0:
                state["left"] -= 1
                if consume_donors:  # a backend that consumed donated inputs before failing
                    for i in exe.donors:
                        args[i].delete()
                raise RuntimeError("RESOURCE_EXHAUSTED: injected execution failure")
            return call(*args)

        exe.call = flaky
        return exe

    monkeypatch.setattr(cache, "compile_graph", compile_graph)


def test_execution_failure_raises_and_loses_nothing(dev, monkeypatch):
    _flaky_compile(monkeypatch, failures=1)
    a, w, y, expected = _scenario(dev, (5, 9))
    with pytest.raises(RuntimeError, match="injected execution failure") as info:
        lx.sync()
    assert any("nothing was donated" in n for n in info.value.__notes__)
    _assert_nothing_lost(a, w, y)
    assert a.cpu().sum().item() == 90.0  # the marked buffer still holds its data
    lx.sync()  # the next sync (same cached executable) works
    torch.testing.assert_close(y.cpu(), expected)
    assert w.tolist() == [[2.0] * 9] * 5


def test_execution_failure_after_backend_consumed_donors_is_reported(dev, monkeypatch):
    # If a backend deletes donated inputs and then fails, those buffers are gone: the
    # tensors behind them must raise DonatedBufferError (never crash or read garbage),
    # everything else keeps its value, and the next sync works.
    _flaky_compile(monkeypatch, failures=1, consume_donors=True)
    keep = torch.full((4, 3), 5.0).to(dev)
    a = torch.full((4, 3), 2.0).to(dev)
    assert lx.set_buffer_donation(a)
    y = a * 2 + keep
    with pytest.raises(RuntimeError, match="injected execution failure") as info:
        lx.sync()
    assert any("consumed 1 donated buffer" in n for n in info.value.__notes__)
    del info   # its traceback holds this frame: y, never computable, would outlive the test
    assert lx.is_donated(a)
    with pytest.raises(lx.DonatedBufferError):
        a.cpu()
    assert not lx.is_donated(keep) and keep.sum().item() == 60.0
    z = keep + 1
    lx.sync()  # y can never be computed (its input is gone); it does not block the barrier
    assert z.sum().item() == 72.0
    assert pending_graphs() == []   # nor the barrier's inspection (lx.debug.ir_text, graph_hash)
    with pytest.raises(lx.DonatedBufferError):
        y.cpu()


@pytest.mark.parametrize("failure", ["not applied", "contained"])
def test_a_failed_sync_keeps_no_tensor_alive(dev, monkeypatch, failure):
    # The error a sync raises holds its graph's frames: no reference cycle through them may
    # keep that graph's tensors alive once the user drops the error and the tensors (a
    # pending tensor left alive fails every later barrier that cannot compute it).
    def fail(graph, donors, *metric):
        raise RuntimeError("RESOURCE_EXHAUSTED: injected compile failure")
    if failure == "not applied":
        monkeypatch.setattr(cache, "compile_graph", fail)
    x = torch.ones(3).to(dev)
    gc.disable()
    try:
        with overriding(aten.cosh.default, "lowering", lambda ctx, *a, **k: 1 / 0):
            y = torch.cosh(x) + 1
            alive = weakref.ref(y._st)
            with pytest.raises(RuntimeError if failure == "not applied" else lx.FailedOpError):
                lx.sync()
            del y
            assert alive() is None
    finally:
        gc.enable()


# -- bad inputs: clear errors at the call ---------------------------------------------------

def test_donating_a_cpu_tensor_raises(dev):
    lazy = torch.ones(3).to(dev)
    with pytest.raises(TypeError, match="lazyxla tensor.*cpu"):
        lx.set_buffer_donation(torch.ones(3))
    with pytest.raises(TypeError, match="lazyxla tensor"):
        lx.set_buffer_donation([lazy, torch.ones(3)])
    assert not lx.get_buffer_donation(lazy), "a failed batch call must mark nothing"
    with pytest.raises(TypeError):
        lx.set_buffer_donation(3.0)
    for fn in (lx.get_buffer_donation, lx.is_donated):
        with pytest.raises(TypeError, match="lazyxla tensor"):
            fn(torch.ones(3))


def test_syncing_a_cpu_tensor_raises(dev):
    pending = torch.ones(3, device=dev) + 1
    with pytest.raises(TypeError, match="sync_tensors expects lazyxla tensors"):
        lx.sync_tensors([pending, torch.ones(3)])
    assert pending._st.value.op != "data", "nothing is synced when the call is rejected"
    with pytest.raises(TypeError):
        lx.sync_tensors(torch.ones(3))
    with pytest.raises(TypeError):
        lx.graph_hash([torch.ones(3)])
    assert pending.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("case", ["binary", "matmul", "where", "cat", "inplace_lazy_target",
                                  "inplace_cpu_target", "out_cpu", "inplace_decomposed_cpu_target"])
def test_mixing_cpu_and_lazy_tensors_raises(dev, case):
    lazy = torch.ones(3, device=dev)
    cpu = torch.ones(3)
    with pytest.raises(RuntimeError, match="cpu") as info:
        if case == "binary":
            lazy + cpu
        elif case == "matmul":
            torch.ones(2, 3) @ torch.ones(3, 2, device=dev)
        elif case == "where":
            torch.where(torch.ones(3, dtype=torch.bool), lazy, cpu)
        elif case == "cat":
            torch.cat([lazy, cpu])
        elif case == "inplace_lazy_target":
            lazy.add_(cpu)
        elif case == "inplace_cpu_target":
            cpu.mul_(lazy)
        elif case == "out_cpu":
            torch.add(lazy, lazy, out=cpu)
        else:
            cpu.index_fill_(0, torch.tensor([0], device=dev), 2.0)
    assert "lazyxla" in str(info.value)
    assert not isinstance(info.value, AttributeError)
    assert lazy.tolist() == [1.0] * 3 and cpu.tolist() == [1.0] * 3


def test_cpu_scalars_and_explicit_transfers_are_allowed(dev):
    lazy = torch.ones(3, device=dev)
    assert (lazy + torch.tensor(2.0)).tolist() == [3.0] * 3  # 0-d CPU tensors act as scalars
    cpu = torch.zeros(3)
    cpu.copy_(lazy * 2)  # copy_ is a transfer
    assert cpu.tolist() == [2.0] * 3
    lazy.copy_(torch.full((3,), 5.0))
    assert lazy.tolist() == [5.0] * 3


def test_mismatched_lazy_devices_raise():
    # Two lazyxla devices: the XLA CPU backend split in two.
    script = textwrap.dedent("""
        import torch, lazyxla as lx
        assert lx.device_count() == 2, lx.device_count()
        a = torch.ones(3, device=lx.device(0))
        b = torch.ones(3, device=lx.device(1))
        try:
            a + b
        except RuntimeError as e:
            assert "lazyxla:0" in str(e) and "lazyxla:1" in str(e), e
        else:
            raise SystemExit("a + b across devices did not raise")
        try:
            a.add_(b)
        except RuntimeError as e:
            assert "lazyxla:1" in str(e), e
        else:
            raise SystemExit("a.add_(b) across devices did not raise")
        c = a + b.to(lx.device(0))
        assert c.tolist() == [2.0] * 3
        print("OK")
    """)
    env = child_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_unsupported_dtypes_raise_at_the_call(dev):
    # complex32 (chalf): XLA has no such type; complex64/128 work (tests/ops/test_complex.py)
    with pytest.raises(TypeError, match="complex32 is not supported"):
        torch.ones(3, dtype=torch.complex32).to(dev)
    with pytest.raises(TypeError, match="complex32 is not supported"):
        torch.zeros(3, dtype=torch.complex32, device=dev)
    x = torch.ones(3, device=dev)
    with pytest.raises(TypeError, match="complex32 is not supported"):
        x.to(torch.complex32)  # at the call, not at the next sync
    with pytest.raises(TypeError, match="complex32"):
        torch.polar(x.half(), x.half())
    lx.sync()  # nothing broken was recorded
    assert x.tolist() == [1.0] * 3


def test_float64_works_on_cpu(dev):
    if lx.platform() == "tpu":
        pytest.skip("no float64 on TPU")
    h = torch.arange(6, dtype=torch.float64).reshape(2, 3) / 3
    x = h.to(dev)
    torch.testing.assert_close((x @ x.t()).cpu(), h @ h.t())
    assert (x.sum() * 3).item() == 15.0


def test_using_a_donated_tensor_raises_a_clear_error(dev):
    a = torch.ones(2, 5).to(dev)
    assert lx.set_buffer_donation(a)
    b = a * 2
    lx.sync()
    assert lx.is_donated(a)
    for use in (lambda: a + 1, lambda: a.cpu(), lambda: a.tolist(), lambda: a[0], lambda: a.add_(1),
                lambda: lx.set_buffer_donation(a), lambda: a.copy_(torch.zeros(2, 5))):
        with pytest.raises(lx.DonatedBufferError, match=r"shape=\[2, 5\], dtype=torch.float32.*donated"):
            use()
    assert isinstance(lx.DonatedBufferError("x"), RuntimeError)
    assert "donated" in repr(a)  # printing never raises
    assert b.sum().item() == 20.0


# -- host fallback failures ------------------------------------------------------------------

def test_host_fallback_failure_reports_op_and_shapes(dev):
    x = torch.arange(4).to(dev) - 2  # pending input: the fallback materialises it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as info:
            torch.bincount(x)  # a host op (data-dependent output size)
    msg = str(info.value)
    assert "bincount" in msg and "Tensor[4]" in msg and "int64" in msg, msg
    assert "non-negative" in msg  # the host's own message is kept
    assert x.tolist() == [-2, -1, 0, 1]  # the input is intact and usable
    assert (x * 2).sum().item() == -4


class _Picky(Exception):
    def __init__(self, code, detail):  # not constructible from one message
        super().__init__(f"{code}: {detail}")


def test_host_fallback_failure_with_an_unusual_exception_type(dev):
    lib = torch.library.Library("lazyxla_failtest", "DEF")
    lib.define("boom(Tensor x, *, int k) -> Tensor")

    def boom(x, *, k):
        raise _Picky(7, "host kernel exploded")

    lib.impl("boom", boom, "CPU")
    x = torch.ones(2, 3, device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(_Picky) as info:
            torch.ops.lazyxla_failtest.boom(x, k=5)
    notes = " ".join(getattr(info.value, "__notes__", ()))
    assert "boom" in notes and "Tensor[2, 3]" in notes and "k=5" in notes, notes
    assert x.sum().item() == 6.0


@pytest.mark.parametrize("make", ["empty", "zeros", "randn", "materialised_expand"])
def test_impossible_allocation_fails_at_the_op_and_leaves_nothing_pending(dev, make):
    # Issue #12: torch.empty(10**13, device=dev) only failed at the next sync, and then
    # every later barrier failed while the tensor lived; eager fails at the op.
    small = torch.ones(3, device=dev) * 2
    with pytest.raises(torch.OutOfMemoryError, match=r"out of memory: tried to allocate .* GiB"):
        if make == "empty":
            torch.empty(10**13, device=dev)
        elif make == "zeros":
            torch.zeros(10**6, 10**7, device=dev)
        elif make == "randn":
            torch.randn(10**13, device=dev)
        else:
            small[:1].expand(10**7, 10**6).contiguous()
    lx.sync()
    assert small.tolist() == [2.0, 2.0, 2.0]
    assert torch.ones(3, device=dev).expand(10**7, 10**6, 3).shape == (10**7, 10**6, 3)   # views allocate nothing
    lx.sync()
