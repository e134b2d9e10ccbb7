"""Save sharded training state from several processes, load it on another mesh, train on.

    python -m lazyxla.examples.spmd_checkpoint [--check]

Run 1 starts 2 processes with 2 host devices each: an MLP whose parameters are sharded
over all 4 devices (dimension 0, FSDP style) trains `--steps` steps with AdamW, then
`lx.spmd.checkpoint.save` writes the model and the optimizer state with
torch.distributed.checkpoint, each process only its own shards. Run 2 is one process
with 2 devices and the parameters sharded along dimension 1 instead: it loads the
checkpoint (resharding), restores the optimizer and trains `--steps` more steps.
`--check` compares the losses of both runs with one eager CPU run of all the steps
(rtol 1e-5) and checks that each parameter shard was written by the process of
run 1 that holds it. Everything
binds to 127.0.0.1; every wait is bounded by `--timeout`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import MetadataIndex

import lazyxla as lx

from ._local_processes import free_port, main as run_main, run_workers, train

_TAG = "RESULT "


def _model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    return model, x, y


def _optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)


def _train(model, opt, x, y, steps: int, barrier=lambda: None) -> list:
    return train(opt, lambda: torch.nn.functional.mse_loss(model(x), y), steps, barrier)


def worker(args) -> None:
    if args.processes > 1:
        lx.distributed.initialize(args.coordinator, args.processes, args.process_id,
                                  initialization_timeout=args.timeout)
    # DCP coordinates its plans over torch.distributed (gloo on the host)
    dist.init_process_group("gloo", init_method=f"tcp://{args.store}", world_size=args.processes,
                            rank=args.process_id)
    lx.spmd.use_spmd()
    mesh = lx.spmd.get_1d_mesh("fsdp")
    dev = lx.device()
    model, x, y = _model_and_data()
    model = model.to(dev)
    dim = 0 if args.phase == "save" else 1   # run 2 shards another dimension on another mesh
    for p in model.parameters():
        lx.spmd.mark_sharding(p, mesh, tuple("fsdp" if d == min(dim, p.dim() - 1) else None
                                             for d in range(p.dim())))
    opt = _optimizer(model)
    x, y = x.to(dev), y.to(dev)
    ck = lx.spmd.checkpoint
    result = {"process": args.process_id, "devices": mesh.size()}
    if args.phase == "save":
        result["losses"] = _train(model, opt, x, y, args.steps, lx.sync)
        ck.save({"model": model.state_dict(), "optim": opt.state_dict()}, args.path)
    else:
        ck.prime_optimizer(opt)   # AdamW's state exists only after a step: create it to load into
        state = {"model": model.state_dict(), "optim": opt.state_dict()}
        ck.load(state, args.path)
        opt.load_state_dict(state["optim"])
        result["specs"] = [lx.spmd.sharding_spec(p) for p in model.parameters()]
        result["losses"] = _train(model, opt, x, y, args.steps, lx.sync)
    dist.barrier()
    dist.destroy_process_group()
    print(_TAG + json.dumps(result), flush=True)


def _run(args, phase: str, processes: int, devices: int, path: str) -> list:
    return run_workers(__spec__.name, ["--phase", phase, "--path", path, "--processes", str(processes),
                                       "--coordinator", f"127.0.0.1:{free_port()}",
                                       "--store", f"127.0.0.1:{free_port()}",
                                       "--steps", str(args.steps), "--timeout", str(args.timeout)],
                       processes, devices, args.timeout, _TAG, label=f"{phase} process")


def _check_writers(path: str, model) -> str:
    """'' if every parameter shard in the checkpoint was written by the process of run 1
    that holds it (rows [0, n/2) on process 0's two devices, the rest on process 1's)."""
    md = FileSystemReader(path).read_metadata()
    for name, p in model.named_parameters():
        fqn = f"model.{name}"
        chunks = md.state_dict_metadata[fqn].chunks
        if len(chunks) != 4:
            return f"{fqn}: expected 4 shards in the checkpoint, got {len(chunks)}"
        for chunk in chunks:
            writer = 0 if chunk.offsets[0] < p.shape[0] // 2 else 1
            stored = md.storage_data[MetadataIndex(fqn, chunk.offsets)].relative_path
            if not stored.startswith(f"__{writer}_"):
                return f"{fqn}: the shard at {list(chunk.offsets)} is in {stored}, not in process {writer}'s file"
    return ""


def launch(args) -> int:
    path = args.path or tempfile.mkdtemp(prefix="lazyxla_checkpoint_")
    saved = _run(args, "save", 2, 2, path)
    files = sorted(os.listdir(path))
    print(f"checkpoint {path}: {files}")
    loaded = _run(args, "load", 1, 2, path)
    if not args.check:
        return 0
    model, x, y = _model_and_data()
    eager = _train(model, _optimizer(model), x, y, 2 * args.steps)
    print(f"eager: {eager}")
    problem = _check_writers(path, model)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    for r in saved:
        if not torch.allclose(torch.tensor(r["losses"]), torch.tensor(eager[:args.steps]), rtol=1e-5):
            print(f"run 1 process {r['process']}: losses differ from eager", file=sys.stderr)
            return 1
    if not torch.allclose(torch.tensor(loaded[0]["losses"]), torch.tensor(eager[args.steps:]), rtol=1e-5):
        print("run 2 (loaded on another mesh): losses differ from eager", file=sys.stderr)
        return 1
    print(f"losses equal eager across the checkpoint ({args.steps} + {args.steps} steps, 4 devices in 2 "
          f"processes, then 2 devices in 1 process)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3, help="steps before and after the checkpoint")
    ap.add_argument("--path", help="checkpoint folder (default: a new temporary one)")
    ap.add_argument("--phase", choices=("save", "load"), help=argparse.SUPPRESS)
    ap.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    return run_main(ap, argv, worker, launch)


if __name__ == "__main__":
    sys.exit(main())
