"""lx.debug: readable IR, explained recompiles, donation report."""
import pytest
import torch

import lazyxla as lx


def test_ir_text_lists_nodes_without_compiling(dev):
    x = torch.randn(4, 4).to(dev)
    y = (x @ x + 1.5).relu()
    text = lx.debug.ir_text([y])
    assert "mm.default(p0, p0)" in text and "scalar 1.5" in text and "relu" in text
    assert lx.metrics.counter_value("UncachedCompile") is None
    assert lx.debug.ir_text([x]) == "(nothing pending)"
    torch.testing.assert_close(y.cpu(), (x.cpu() @ x.cpu() + 1.5).relu())


def test_explain_last_compile_names_the_changed_node(dev, fresh_compile_cache):
    x = torch.randn(4, 4).to(dev)
    (x @ x).relu()
    keep = (x @ x).relu()
    lx.sync()
    z = torch.randn(8, 4).to(dev)
    keep = (z @ x).relu()
    lx.sync()
    reason = lx.debug.explain_last_compile()
    assert "[8, 4]" in reason and "[4, 4]" in reason, reason
    assert keep.shape == (8, 4)


def test_explain_donor_only_change(dev):
    a = torch.randn(16).to(dev)
    b = a * 3
    lx.sync()
    a2 = torch.randn(16).to(dev)
    lx.set_buffer_donation(a2)
    b2 = a2 * 3
    lx.sync()
    reason = lx.debug.explain_last_compile()
    assert "donor set changed" in reason, reason
    assert lx.is_donated(a2)
    assert b.shape == b2.shape


def test_donation_report_explains(dev):
    w = torch.randn(1024).to(dev)
    kept = torch.randn(1024).to(dev)
    w.mul_(2)
    out = kept + 1
    lx.sync()
    report = lx.debug.donation_report()
    assert report.donors == 1 and report.donated_bytes == 4096
    assert report.saved_bytes == 4096
    text = str(report)
    assert "reused by an output" in text and "held by its tensor" in text
    assert out.shape == (1024,)


def test_tensor_info_tells_the_state_without_syncing(dev):
    x = torch.randn(4).to(dev)
    y = x * 2
    info = lx.debug.tensor_info(x)
    assert (info["state"], info["donate"]) == ("device data", False)
    assert (info["shape"], info["dtype"]) == ((4,), torch.float32)
    assert lx.debug.tensor_info(y)["state"] == "pending" and lx.debug.tensor_info(y)["donate"] is None
    view = lx.debug.tensor_info(x[1:])
    assert (view["state"], view["base_state"], view["buffer_id"]) == ("view", "device data", info["buffer_id"])
    assert lx.metrics.counter_value("UncachedCompile") is None   # nothing ran
    assert lx.set_buffer_donation(x)
    w = x + 1
    lx.sync()
    after = lx.debug.tensor_info(x)
    assert (after["state"], after["donate"]) == ("donated", True)   # the flag stays on the dead buffer
    assert lx.debug.tensor_info(w)["state"] == "device data"
    with pytest.raises(TypeError, match="lazyxla tensor"):
        lx.debug.tensor_info(torch.zeros(1))


def test_host_timeline_records_each_sync_with_its_stages_and_line(dev, tmp_path):
    import json
    w = torch.ones(8).to(dev)
    lx.sync()
    path = tmp_path / "trace.json"
    with lx.debug.host_timeline(str(path)) as recording:
        for _ in range(3):
            w.mul_(0.5)
            lx.sync()   # the line each barrier names
        value = w.sum().item()
    assert value == 8 * 0.5 ** 3
    summary = recording.summary()
    assert summary["step barrier"]["count"] == 3
    for stage in ("collect", "plan", "key and cache", "dispatch", "install"):
        assert summary[stage]["count"] == 4, stage   # three barriers and the read
    assert summary["trace"]["count"] == 3             # between the four syncs
    assert sum(v["count"] for k, v in summary.items() if k.startswith("device:")) == 4
    barriers = [e for e in recording.events if e[0] == "step barrier"]
    assert all(e[4]["line"].endswith(f"test_debug.py:{_line_of('lx.sync()   # the line each barrier names')}")
               for e in barriers)
    trace = json.loads(path.read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"step barrier", "collect", "dispatch", "host read"} <= names
    assert "host timeline" in str(recording)


def test_host_timeline_is_off_outside_the_block(dev):
    from lazyxla.runtime import timeline
    with lx.debug.host_timeline():
        pass
    assert not timeline.REC.on and timeline.start() == 0
    (torch.ones(2).to(dev) + 1).cpu()
    assert timeline.REC.events == []


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line_of" not in line)
