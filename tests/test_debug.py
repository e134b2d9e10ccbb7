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
