"""lx.data.DeviceLoader: batches moved with their structure, in order, with the loader's
exceptions in place, background threads that stop on close / garbage collection, uploads
that do not hold the runtime lock, step barriers as PyTorch/XLA's loader places them.
Values and counters only, never timings (scripts/loader_overlap.py measures the overlap)."""
import collections
import copy
import gc
import itertools
import threading
import time

import pytest
import torch

import lazyxla as lx
import lazyxla.frontend.uploads as uploads
from lazyxla.lock import LOCK

Pair = collections.namedtuple("Pair", "a b")


def _loader_threads() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("lazyxla-loader")]


def _wait_no_threads(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _loader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _loader_threads(), _loader_threads()


def _batch(i: int):
    from transformers import BatchEncoding
    enc = BatchEncoding({"input_ids": torch.arange(4) + i, "mask": torch.ones(4, dtype=torch.bool)}, n_sequences=1)
    shared = torch.full((3,), float(i))
    return (shared, [torch.tensor([i]), "text", 7],
            {"pair": Pair(torch.eye(2) * i, None), "same": shared,
             "od": collections.OrderedDict(z=torch.zeros(1, dtype=torch.int64) + i)},
            enc)


def _check(out, i: int, dev) -> None:
    shared, lst, d, enc = out
    assert type(out) is tuple and type(lst) is list and type(d["pair"]) is Pair
    assert type(d["od"]) is collections.OrderedDict and type(enc).__name__ == "BatchEncoding"
    for t in (shared, lst[0], d["pair"].a, d["od"]["z"], enc["input_ids"], enc["mask"]):
        assert t.device == dev
    assert d["same"] is shared   # one source tensor, one upload
    assert lst[1:] == ["text", 7] and d["pair"].b is None and enc.n_sequences == 1
    assert shared.cpu().tolist() == [float(i)] * 3 and lst[0].item() == i
    assert d["pair"].a.cpu().equal(torch.eye(2) * i) and d["od"]["z"].item() == i
    assert enc["input_ids"].cpu().tolist() == [i, i + 1, i + 2, i + 3] and enc["mask"].dtype == torch.bool


@pytest.mark.parametrize("prefetch, threads", [(0, 1), (1, 1), (2, 1), (3, 3)])
def test_batches_keep_structure_values_and_order(dev, prefetch, threads):
    data = [_batch(i) for i in range(6)]
    loader = lx.data.DeviceLoader(data, prefetch=prefetch, transfer_threads=threads)
    seen = 0
    for i, out in enumerate(loader):
        _check(out, i, dev)
        seen += 1
    assert seen == 6 == len(loader)
    assert data[0][3]["input_ids"].device.type == "cpu" and data[0][2]["od"]["z"].device.type == "cpu"
    _wait_no_threads()


def test_order_kept_when_later_uploads_finish_first(dev):
    """Even batches are large (slow to upload), odd ones tiny: three threads finish out of order."""
    data = [torch.full((2_000_000,) if i % 2 == 0 else (1,), float(i)) for i in range(12)]
    got = [b[0].item() for b in lx.data.DeviceLoader(data, prefetch=4, transfer_threads=3)]
    assert got == [float(i) for i in range(12)]


def test_on_device_tensors_pass_through_and_grad_leaves(dev):
    on_device = torch.ones(2, device=dev)
    needs_grad = torch.ones(2, requires_grad=True)
    (a, b), = list(lx.data.DeviceLoader([(on_device, needs_grad)], prefetch=1))
    assert a is on_device
    assert b.device == dev and b.requires_grad and b.is_leaf


def test_host_loader_exception_reaches_the_loop_after_earlier_batches(dev):
    def source():
        for i in range(3):
            yield torch.tensor([i])
        raise ValueError("bad sample 3")

    it = iter(lx.data.DeviceLoader(source(), prefetch=2))
    assert [next(it).item() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad sample 3"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    _wait_no_threads()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_upload_exception_reaches_the_loop_in_place(dev, prefetch):
    class Failing(lx.data.DeviceLoader):
        def stage(self, batch):   # the copy half of upload(), run by the transfer threads
            if batch.item() == 2:
                raise RuntimeError("upload of batch 2 failed")
            return super().stage(batch)

    got = []
    with pytest.raises(RuntimeError, match="batch 2 failed"):
        for b in Failing([torch.tensor([i]) for i in range(5)], prefetch=prefetch, transfer_threads=2):
            got.append(b.item())
    assert got == [0, 1]
    _wait_no_threads()


def _counting_source(counter: list):
    for i in itertools.count():
        counter[0] += 1
        yield torch.tensor([i])


def test_close_after_early_break_stops_threads_and_reading(dev):
    fetched = [0]
    it = iter(lx.data.DeviceLoader(_counting_source(fetched), prefetch=2, host_prefetch=2))
    assert [next(it).item() for _ in range(3)] == [0, 1, 2]
    it.close()
    assert not _loader_threads()
    read = fetched[0]
    assert read <= 3 + 2 + 2 + 2, read   # taken + uploaded ahead + host queue + one in each thread's hands
    time.sleep(0.05)
    assert fetched[0] == read
    with pytest.raises(StopIteration):
        next(it)


def test_dropped_iterator_is_collected_and_its_threads_end(dev):
    fetched = [0]
    for b in lx.data.DeviceLoader(_counting_source(fetched), prefetch=2):
        if b.item() == 4:
            break
    del b
    gc.collect()
    _wait_no_threads()


def test_prefetch_bounds_the_batches_uploaded_ahead(dev):
    uploaded = [0]

    class Counting(lx.data.DeviceLoader):
        def stage(self, batch):
            uploaded[0] += 1
            return super().stage(batch)

    it = iter(Counting([torch.tensor([i]) for i in range(20)], prefetch=3, transfer_threads=2))
    for taken in range(1, 8):
        next(it)
        time.sleep(0.02)
        assert uploaded[0] <= taken + 3, (taken, uploaded[0])
    it.close()


def test_uploads_run_while_another_thread_holds_the_runtime_lock(dev, monkeypatch):
    """The copy itself never takes the runtime lock: a training thread tracing or syncing
    meanwhile is not held up (only wrapping the result into a lazy tensor waits)."""
    copied = threading.Event()
    real = uploads.upload_now

    def upload_now(*args, **kwargs):
        out = real(*args, **kwargs)
        copied.set()
        return out

    monkeypatch.setattr(uploads, "upload_now", upload_now)
    with LOCK:
        it = iter(lx.data.DeviceLoader([torch.arange(1000.0)], prefetch=1, barrier_every=None))
        assert copied.wait(10.0), "the upload waited for the runtime lock"
    assert next(it).sum().item() == sum(range(1000))
    it.close()


def test_iterating_while_holding_the_runtime_lock_does_not_deadlock(dev):
    """Only the taking thread takes the lock (to wrap the uploads), so a loop that holds
    it (lazyxla/lock.py allows user code to) gets its batches."""
    got, errors = [], []

    def loop():
        try:
            with LOCK:
                for b in lx.data.DeviceLoader([torch.tensor([i]) for i in range(4)], prefetch=2, transfer_threads=2):
                    got.append(b.item())
        except BaseException as e:   # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    t.join(30.0)
    assert not t.is_alive(), "the loop deadlocked on the runtime lock"
    assert not errors and got == [0, 1, 2, 3]


@pytest.mark.parametrize("every, barriers", [(1, 5), (2, 3), (None, 0)])
def test_step_barriers_as_pytorch_xla_places_them(dev, every, barriers):
    loader = lx.data.DeviceLoader([torch.ones(2) * i for i in range(3)], barrier_every=every)
    lx.metrics.clear_all()
    outs = [(b * 2) for b in loader]
    assert (lx.metrics.counter_value("MarkStep") or 0) == barriers
    assert [o.cpu().tolist() for o in outs] == [[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]


def test_training_over_the_loader_matches_eager(dev):
    """Background uploads interleave with the training thread's tracing and syncs."""
    torch.manual_seed(0)
    data = [(torch.randn(16, 8), torch.randn(16, 1)) for _ in range(6)]
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    cpu_model = copy.deepcopy(model)
    model.to(dev)

    def train(m, batches):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for x, y in batches:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    expected = train(cpu_model, data)
    got = train(model, lx.data.DeviceLoader(data, prefetch=2, transfer_threads=2))
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(prefetch=-1), "prefetch"), (dict(transfer_threads=0), "transfer_threads"),
    (dict(barrier_every=0), "barrier_every"), (dict(host_prefetch=0), "host_prefetch"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lx.data.DeviceLoader([], **kwargs)


def test_sharding_needs_spmd_and_spec_objects():
    with pytest.raises(TypeError, match="ShardingSpec"):
        lx.data.DeviceLoader([], sharding=("x", None))
    mesh = lx.spmd.Mesh([0], (1,), ("x",))
    with pytest.raises(RuntimeError, match="SPMD mode"):
        lx.data.DeviceLoader([], sharding=lx.spmd.ShardingSpec(mesh, ("x", None)))
