"""`torch_xla.test.test_utils`: the progress lines and TensorBoard summaries of upstream's
example and test scripts, and `mp_test`, which runs a test in a child process. Plain
Python over `torch_xla.debug.metrics` and `torch_xla.runtime`."""
from __future__ import annotations

import functools
import multiprocessing
import time
import unittest
from datetime import datetime
from typing import Any, Callable, Dict, Optional

from ...unsupported import unsupported_names
from .. import runtime as xr
from ..debug import metrics as met


def _device_spec(device: Any) -> str:
    return f"{device}/{xr.global_ordinal()}"


def mp_test(func: Callable) -> Callable:
    """Upstream's decorator: `func(*args, **kwargs)` runs in a child process
    (`multiprocessing.Process`); a `unittest.TestCase` method asserts that the child
    exited with status 0. Returns the child's exit code."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Optional[int]:
        proc = multiprocessing.Process(target=func, args=args, kwargs=kwargs)
        proc.start()
        proc.join()
        if args and isinstance(args[0], unittest.TestCase):
            args[0].assertEqual(proc.exitcode, 0)
        return proc.exitcode
    return wrapper


def now(format: str = "%H:%M:%S") -> str:
    return datetime.now().strftime(format)


def _print_update(kind: str, device: Any, fields: list) -> None:
    items = [kind, f"Device={_device_spec(device)}", *fields, f"Time={now()}"]
    print("|", " ".join(item for item in items if item), flush=True)


def print_training_update(device: Any, step: int, loss: float, rate: float, global_rate: float,
                          epoch: Optional[int] = None, summary_writer: Any = None) -> None:
    """`| Training Device=xla:0/0 Epoch=1 Step=10 Loss=0.12345 Rate=... GlobalRate=... Time=...`;
    the two rates also go to `summary_writer`, if given."""
    _print_update("Training", device, [
        f"Epoch={epoch}" if epoch is not None else None, f"Step={step}", f"Loss={loss:.5f}",
        f"Rate={rate:.2f}", f"GlobalRate={global_rate:.2f}"])
    if summary_writer:
        write_to_summary(summary_writer, dict_to_write={"examples/sec": rate, "average_examples/sec": global_rate})


def print_test_update(device: Any, accuracy: Optional[float], epoch: Optional[int] = None,
                      step: Optional[int] = None) -> None:
    """`| Test Device=xla:0/0 Step=... Epoch=... Accuracy=97.50 Time=...`."""
    _print_update("Test", device, [
        f"Step={step}" if step is not None else None, f"Epoch={epoch}" if epoch is not None else None,
        f"Accuracy={accuracy:.2f}" if accuracy is not None else None])


def _metric_points() -> Dict[str, float]:
    """The metrics as upstream's parsed report names them: `<counter>__Value`,
    `<metric>__TotalSamples`, `<metric>__Accumulator` (lazyxla's raw accumulator)."""
    points: Dict[str, float] = {f"{name}__Value": met.counter_value(name) or 0 for name in met.counter_names()}
    for name in met.metric_names():
        data = met.metric_data(name)
        if data is not None:
            points[f"{name}__TotalSamples"], points[f"{name}__Accumulator"] = data[0], data[1]
    return points


def write_to_summary(summary_writer: Any, global_step: Optional[int] = None, dict_to_write: Dict = {},
                     write_xla_metrics: bool = False) -> None:
    """`summary_writer.add_scalar` for each entry of `dict_to_write`, and with
    `write_xla_metrics` for each metric point plus `aten_ops_sum` (host fallback ops).
    A `None` writer writes nothing."""
    if summary_writer is None:
        return
    for key, value in dict_to_write.items():
        summary_writer.add_scalar(key, value, global_step)
    if write_xla_metrics:
        points = _metric_points()
        for key, value in points.items():
            summary_writer.add_scalar(key, value, global_step)
        summary_writer.add_scalar("aten_ops_sum", sum(v for k, v in points.items() if k.startswith("aten::")),
                                  global_step)


def get_summary_writer(logdir: Optional[str]) -> Any:
    """A TensorBoard SummaryWriter on `logdir` (tensorboardX's, as upstream, else
    torch.utils.tensorboard's) with the start time written; None without a `logdir`."""
    if not logdir:
        return None
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError("torch_xla.test.test_utils.get_summary_writer needs tensorboardX or tensorboard "
                              "(pip install tensorboardX)") from e
    writer = SummaryWriter(log_dir=logdir)
    write_to_summary(writer, 0, dict_to_write={"TensorboardStartTimestamp": time.time()})
    return writer


def close_summary_writer(summary_writer: Any) -> None:
    if summary_writer is not None:
        summary_writer.flush()
        summary_writer.close()


__getattr__ = unsupported_names(__name__)
