"""How much of a batch's upload `lx.data.DeviceLoader` hides behind the step (issue #31).

Batches of `--mb` MB (float32 [n, 512, 512]) from a list of CPU tensors (so that
fetching costs nothing and the upload is what is measured), or with `--collate` from a
torch DataLoader over 1 MB samples (each batch a 64-sample `torch.stack`, made in the
iterating thread by the synchronous loader and in the fetch thread by the overlapping one); the step reduces the batch
to [512, 512] and runs L tanh(y @ W) layers (L from `--layers`, e.g. 24,4: a heavy and a
light step), then reads the loss. Reported, in ms per step (median over `--steps` after
3 warm-up steps; the two loops alternate `--repeat` times and the fastest of those is
shown, the figure least disturbed by other load on the machine):

  upload   `lx.data.DeviceLoader(...).upload(batch)` alone
  step     the step alone, on a batch already on the device
  sync     the loop over DeviceLoader(prefetch=0): upload, then step, one after the other
  overlap  the loop over DeviceLoader(prefetch=2): the next uploads run during the step

`python scripts/loader_overlap.py [--mb 64] [--layers 24,4] [--steps 20] [--repeat 3]`
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.utils.data

import lazyxla as lx


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--layers", default="24,4")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--collate", action="store_true")
    args = ap.parse_args()
    dev = lx.device()
    n = args.mb * (1 << 20) // (512 * 512 * 4)
    batches = [torch.randn(n, 512, 512) for _ in range(4)]
    weight = (torch.randn(512, 512) / 512 ** 0.5).to(dev)
    source = "DataLoader(collate)" if args.collate else "list"
    print(f"batch {args.mb} MB from a {source}, median of {args.steps} steps (ms), load average before: "
          f"{os.getloadavg()}")
    for layers in (int(v) for v in args.layers.split(",")):
        report(figures(batches, weight, layers, args.steps, args.repeat, args.collate), layers)


def _collated(batches: list, count: int) -> torch.utils.data.DataLoader:
    samples = [b[i] for b in batches for i in range(b.shape[0])]
    n = batches[0].shape[0]
    return torch.utils.data.DataLoader([samples[i % len(samples)] for i in range(count * n)], batch_size=n)


def figures(batches: list, weight: torch.Tensor, layers: int, steps: int, repeat: int, collate: bool) -> dict:
    def step(x: torch.Tensor) -> float:
        y = x.mean(0)
        for _ in range(layers):
            y = torch.tanh(y @ weight)
        return y.sum().item()

    def timed(fn) -> float:
        times = []
        for i in range(steps + 3):
            t0 = time.perf_counter()
            fn(i)
            if i >= 3:
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    def loop(prefetch: int) -> float:
        data = _collated(batches, steps + 3) if collate else [batches[i % len(batches)] for i in range(steps + 3)]
        times, t0 = [], time.perf_counter()
        for i, batch in enumerate(lx.data.DeviceLoader(data, prefetch=prefetch)):
            step(batch)
            t1 = time.perf_counter()
            if i >= 3:
                times.append(t1 - t0)
            t0 = t1
        return statistics.median(times) * 1e3

    uploader = lx.data.DeviceLoader([], prefetch=0)
    on_device = uploader.upload(batches[0])
    runs: dict = {"sync": [], "overlap": []}
    for _ in range(repeat):
        runs["sync"].append(loop(0))
        runs["overlap"].append(loop(2))
    return {"upload": min(timed(lambda i: uploader.upload(batches[i % len(batches)])) for _ in range(repeat)),
            "step": min(timed(lambda i: step(on_device)) for _ in range(repeat)),
            "sync": min(runs["sync"]), "overlap": min(runs["overlap"])}


def report(f: dict, layers: int) -> None:
    print(f"{layers} layers:")
    for name, ms in f.items():
        print(f"  {name:8s} {ms:8.1f}")
    print(f"  overlap saves {f['sync'] - f['overlap']:.1f} ms a step (the upload alone is {f['upload']:.1f} ms)")


if __name__ == "__main__":
    main()
