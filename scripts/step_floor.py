"""The least a Python `__torch_dispatch__` runtime can spend on one W2 training step's host side.

    python scripts/step_floor.py [--size proxy|reference|gpt2] [--steps 30]

Trains W2's GPT (lazyxla/workloads.py: forward, backward, foreach AdamW) three ways in one
process and prints the median step in ms: eager CPU; `Floor`, a wrapper subclass whose
`__torch_dispatch__` does only what any such runtime must (a cached shape lookup per op
and a fresh wrapper per output; in-place ops return their target), so the figure is
PyTorch's own Python dispatch, autograd and optimizer code for the step; and lazyxla's
lazy step (tracing, the implied barrier's sync, no wait for the device). lazyxla's host
time per step cannot fall below `Floor`'s without skipping the per-op dispatch itself.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn import functional as F

import lazyxla as lx
from lazyxla import workloads as W

SIZES = {"proxy": (dict(d=64, heads=4, layers=4, seq=32), 2),
         "reference": ({}, 8),
         "gpt2": (dict(vocab=50304, d=768, heads=12, layers=12, seq=512), 8)}
_META = torch.device("meta")


class Floor(torch.Tensor):
    """A wrapper subclass that computes nothing (module docstring)."""
    _outputs: dict = {}

    @staticmethod
    def make(spec: tuple) -> "Floor":
        shape, stride, offset, dtype = spec
        return torch.Tensor._make_wrapper_subclass(Floor, shape, strides=stride, storage_offset=offset,
                                                   dtype=dtype, device=_META)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = torch.utils._pytree.tree_flatten((args, kwargs))
        key = (func, spec, tuple(_spec_of(a) if isinstance(a, torch.Tensor) else a
                                 if isinstance(a, (int, float, bool, str, type(None), torch.dtype)) else type(a)
                                 for a in flat))
        plan = cls._outputs.get(key)
        if plan is None:
            plan = cls._outputs[key] = _plan(func, flat, spec)
        out_spec, outputs = plan
        return torch.utils._pytree.tree_unflatten(
            [flat[o] if isinstance(o, int) else Floor.make(o) if o is not None else None for o in outputs], out_spec)


def _spec_of(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def _plan(func, flat: list, spec) -> tuple:
    """Run `func` on meta tensors once: per output, the input it returns (in place) or its spec."""
    meta = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=_META).as_strided(
        a.shape, a.stride(), a.storage_offset()) if isinstance(a, torch.Tensor) else a for a in flat]
    margs, mkwargs = torch.utils._pytree.tree_unflatten(meta, spec)
    out = func(*margs, **mkwargs)
    leaves, out_spec = torch.utils._pytree.tree_flatten(out)
    position = {id(m): i for i, m in enumerate(meta) if isinstance(m, torch.Tensor)}
    outputs = [position.get(id(o), _spec_of(o)) if isinstance(o, torch.Tensor) else None for o in leaves]
    return out_spec, outputs


def _train(device: str, size: str, steps: int, floor: bool = False) -> float:
    overrides, batch = SIZES[size]
    cfg = W.GPTConfig(**overrides)
    torch.manual_seed(0)
    model = W.gpt(cfg)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=torch.Generator().manual_seed(1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if floor:
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[name] = torch.nn.Parameter(Floor.make(_spec_of(p)))
            for name, b in list(module._buffers.items()):
                if b is not None:
                    module._buffers[name] = Floor.make(_spec_of(b))
        x, y = Floor.make(_spec_of(x)), Floor.make(_spec_of(y))
    else:
        model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    times = []
    for i in range(5 + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="proxy")
    parser.add_argument("--steps", type=int, default=30)
    opts = parser.parse_args()
    print(f"W2 {opts.size} step, host only, median of {opts.steps} (lazyxla on {lx.platform()}):")
    print(f"  eager CPU            {_train('cpu', opts.size, opts.steps):8.2f} ms")
    print(f"  Floor subclass       {_train('meta', opts.size, opts.steps, floor=True):8.2f} ms")
    print(f"  lazyxla lazy         {_train(str(lx.device()), opts.size, opts.steps):8.2f} ms")


if __name__ == "__main__":
    main()
