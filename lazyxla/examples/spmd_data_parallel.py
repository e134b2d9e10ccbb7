"""Data-parallel training over several processes on localhost (SPMD, docs/spmd.md).

    python -m lazyxla.examples.spmd_data_parallel --processes 2 --devices-per-process 4

starts one coordinator-connected process per `--processes` (CPU: each gets
`--devices-per-process` forced host devices), trains W1 (the MLP) with the
batch split over all devices of all processes, and prints each process's
losses. On several machines, start one process on each with `--coordinator HOST:PORT
--processes N --process-id I` (docs/spmd.md, "Many machines"). `--check` compares them
with one eager CPU run (rtol 1e-4), and checks that a global
batch reads back whole from a sharded tensor and from `lx.data.DeviceLoader`
with a `minibatch=True` spec (each process loading only its part). Everything
binds to 127.0.0.1; every wait is bounded by `--timeout`.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys

import torch

import lazyxla as lx
from lazyxla.workloads import make

from ._local_processes import free_port, main as run_main, run_workers, train

_TAG = "LOSSES "


def _train(w, model, steps: int, place=lambda t: t, barrier=lambda: None) -> list:
    return train(w.optimizer(model.parameters()), lambda: w.loss(model, place(w.inputs), place(w.targets)), steps,
                 barrier)


def _workload(batch: int):
    return make("mlp", batch=batch)


def worker(args) -> None:
    lx.distributed.initialize(args.coordinator, args.processes, args.process_id,
                              initialization_timeout=args.timeout, heartbeat_timeout_seconds=args.heartbeat_timeout)
    lx.spmd.use_spmd()
    mesh = lx.spmd.get_1d_mesh("data")
    dev = lx.device()
    w = _workload(args.batch)
    model = copy.deepcopy(w.model).to(dev)

    def place(t):
        # every process holds the whole host batch; only its own devices' slices are placed
        return lx.spmd.mark_sharding(t.to(dev), mesh, ("data",) + (None,) * (t.dim() - 1))

    losses = _train(w, model, args.steps, place, lx.sync)
    # a host read of a tensor sharded over both processes returns the global value
    n = 2 * len(mesh.device_ids)
    spread = place(torch.arange(float(n))) * 3
    global_read = spread.cpu().equal(torch.arange(float(n)) * 3)
    # a loader with minibatch=True: each process loads only its part of the global batch
    whole = torch.arange(float(n * 2)).reshape(n, 2)
    part = whole.chunk(args.processes)[args.process_id]
    spec = lx.spmd.ShardingSpec(mesh, ("data", None), minibatch=True)
    loaded = next(iter(lx.data.DeviceLoader([part], sharding=spec)))
    minibatch = tuple(loaded.shape) == tuple(whole.shape) and loaded.cpu().equal(whole)
    print(_TAG + json.dumps({"process": lx.distributed.process_index(), "of": lx.distributed.process_count(),
                             "devices": len(mesh.device_ids), "local_shards": len(lx.spmd.local_shards(spread)),
                             "global_read": global_read, "minibatch": minibatch, "losses": losses}), flush=True)


def launch(args) -> int:
    coordinator = f"127.0.0.1:{free_port()}"
    results = run_workers(__spec__.name, ["--coordinator", coordinator, "--processes", str(args.processes),
                                          "--steps", str(args.steps), "--batch", str(args.batch),
                                          "--timeout", str(args.timeout)],
                          args.processes, args.devices_per_process, args.timeout, _TAG)
    if args.check:
        w = _workload(args.batch)
        eager = _train(w, copy.deepcopy(w.model), args.steps)
        print(f"eager: {eager}")
        for r in results:
            if not r["global_read"] or not r["minibatch"] or r["local_shards"] != args.devices_per_process:
                print(f"process {r['process']}: wrong global read, minibatch load or shard count", file=sys.stderr)
                return 1
            if not torch.allclose(torch.tensor(r["losses"]), torch.tensor(eager), rtol=1e-4):
                print(f"process {r['process']} losses differ from eager", file=sys.stderr)
                return 1
        print(f"losses equal eager in all {len(results)} processes")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--devices-per-process", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16, help="global batch (split over all devices)")
    return run_main(ap, argv, worker, launch)


if __name__ == "__main__":
    sys.exit(main())
