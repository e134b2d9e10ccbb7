"""Run PyTorch's OpInfo database with complex samples on lazyxla and compare with eager.

A coverage probe for complex dtypes (issue #15), not a test: the OpInfo harness proper
is tests/ops/test_opinfo.py. For every `op_db` entry whose CPU dtypes include `--dtype`,
the first `--samples` sample inputs run on eager CPU and on lazyxla, compared with
atol 1e-3 / rtol 1e-5 as torchax does (complex outputs compare real and imaginary
parts). With `--grad`, entries that support autograd also compare the gradients of
the real part of sum(outputs * fixed weights) with respect to every input tensor.
An entry passes when every sample matches; "via host" when it passes but some ATen
op ran on the host (an `aten::` counter was set).

    python scripts/opinfo_complex.py [--dtype complex64] [--samples 3] [--grad] [--only fft.fft,abs]
"""
from __future__ import annotations

import argparse
import signal
import sys
import traceback
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db

import lazyxla as lx


def to_dev(value, dev):
    if isinstance(value, torch.Tensor):
        return value.detach().to(dev).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(to_dev(v, dev) for v in value)
    if isinstance(value, dict):
        return {k: to_dev(v, dev) for k, v in value.items()}
    return value


def compare(actual, expected) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"got {type(actual).__name__}"
        actual = actual.detach().cpu()
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
        torch.testing.assert_close(actual.resolve_conj().resolve_neg(), expected.resolve_conj().resolve_neg(),
                                   atol=1e-3, rtol=1e-5, equal_nan=True)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            compare(a, e)
    elif isinstance(expected, (int, float, complex, bool)):
        assert actual == expected or (actual != actual and expected != expected), f"{actual} != {expected}"


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def tensors_in(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def grads(out, inputs: list) -> list:
    """d real(sum(out * w)) / d inputs, with weights drawn from a fixed seed."""
    outs = [o for o in tensors_in(out) if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not outs:
        return []
    gen = torch.Generator().manual_seed(0)
    loss = sum(torch.real((o * torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device)).sum()) for o in outs)
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def run_entry(op, dtype, n_samples: int, dev, with_grad: bool = False) -> tuple[str, str]:
    with_grad = with_grad and op.supports_autograd
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=with_grad))[:n_samples]
    except Exception as e:  # noqa: BLE001
        return "no-samples", f"{type(e).__name__}: {e}"
    ran = 0
    lx.metrics.clear_all()
    for s in samples:
        leaves = [t for t in tensors_in([s.input, s.args, s.kwargs]) if t.requires_grad] if with_grad else []
        try:
            expected = op(s.input, *s.args, **s.kwargs)
            expected_grads = grads(expected, leaves) if leaves else []
        except Exception:  # noqa: BLE001  (eager refuses this sample: not ours to run)
            continue
        ran += 1
        try:
            din, dargs, dkw = to_dev(s.input, dev), to_dev(s.args, dev), to_dev(s.kwargs, dev)
            actual = op(din, *dargs, **dkw)
            compare(actual, expected)
            if leaves:
                dleaves = [t for t in tensors_in([din, dargs, dkw]) if t.requires_grad]
                compare([g if g is not None else 0 for g in grads(actual, dleaves)],
                        [g if g is not None else 0 for g in expected_grads])
        except Timeout:
            raise
        except Exception as e:  # noqa: BLE001
            lines = traceback.format_exception_only(type(e), e)
            return "fail", " ".join("".join(lines).split())[:300]
    if not ran:
        return "no-samples", "eager ran none"
    host = [n for n in lx.metrics.counter_names() if n.startswith("aten::")]
    return ("host", ",".join(host)) if host else ("pass", "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="complex64")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--grad", action="store_true")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    only = set(a.only.split(",")) if a.only else None
    dev = lx.device()
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    counts: dict = {}
    for op in op_db:
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if only and op.name not in only and full not in only:
            continue
        if dtype not in op.supported_dtypes("cpu"):
            continue
        signal.alarm(a.timeout)
        try:
            status, why = run_entry(op, dtype, a.samples, dev, a.grad)
        except Timeout:
            status, why = "fail", "timeout"
        except Exception as e:  # noqa: BLE001
            status, why = "fail", f"harness: {type(e).__name__}: {e}"[:300]
        finally:
            signal.alarm(0)
        try:
            lx.sync()
        except Exception:  # noqa: BLE001
            pass
        counts[status] = counts.get(status, 0) + 1
        if status != "pass" or a.verbose:
            print(f"{status:10s} {full}: {why}", flush=True)
    runnable = sum(v for k, v in counts.items() if k != "no-samples")
    print(f"\n{a.dtype}{' with gradients' if a.grad else ''}: {runnable} entries with runnable samples: pass {counts.get('pass', 0)}, "
          f"pass via host {counts.get('host', 0)}, fail {counts.get('fail', 0)} "
          f"(no runnable samples: {counts.get('no-samples', 0)})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
