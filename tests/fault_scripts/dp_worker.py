"""One process of a data-parallel run over several processes (SPMD, lx.distributed),
checkpointing with lx.spmd.CheckpointManager and resuming from its latest commit. Prints
`STEP <n> <loss>` after each step; process 0 saves the final parameters to --out.
`--die P:STEP` makes process P kill itself (SIGKILL) after step STEP; `--preempt P:STEP`
sends it SIGTERM instead, and every process saves at the step they agree on and stops. Run by
tests/test_dead_hosts.py, on localhost or in network namespaces."""
import argparse
import datetime
import os
import signal

import torch
import torch.distributed as dist

import lazyxla as lx
from kill_points import batch, make_model

ap = argparse.ArgumentParser()
ap.add_argument("--coordinator", required=True)
ap.add_argument("--dist-port", type=int, required=True)
ap.add_argument("--processes", type=int, required=True)
ap.add_argument("--process-id", type=int, required=True)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--interval", type=int, default=2)
ap.add_argument("--heartbeat", type=int, default=5)
ap.add_argument("--ckpt", required=True)
ap.add_argument("--die", default="")
ap.add_argument("--preempt", default="", help="P:STEP: process P gets SIGTERM after step STEP")
ap.add_argument("--out", default="")
args = ap.parse_args()

lx.distributed.initialize(args.coordinator, args.processes, args.process_id,
                          heartbeat_timeout_seconds=args.heartbeat, initialization_timeout=60)
host = args.coordinator.rsplit(":", 1)[0]
dist.init_process_group("gloo", init_method=f"tcp://{host}:{args.dist_port}", world_size=args.processes,
                        rank=args.process_id, timeout=datetime.timedelta(seconds=60))
lx.spmd.use_spmd()
mesh = lx.spmd.get_1d_mesh("data")
dev = lx.device()
model = make_model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
manager = lx.spmd.CheckpointManager(args.ckpt, save_interval=args.interval, save_on_preemption=bool(args.preempt))
start = manager.restore_latest({"model": model.state_dict(), "optim": opt.state_dict()}, opt)
print(f"START {start} {manager.all_steps()}", flush=True)
victim, die_at = (int(v) for v in args.die.split(":")) if args.die else (-1, -1)
noticed, notice_at = (int(v) for v in args.preempt.split(":")) if args.preempt else (-1, -1)
for step in range(start, args.steps):
    x, y = batch(step)
    x = lx.spmd.mark_sharding(x.repeat(4, 1).to(dev), mesh, ("data", None))   # 12 rows over the devices
    y = lx.spmd.mark_sharding(y.repeat(4, 1).to(dev), mesh, ("data", None))
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    lx.sync()
    print(f"STEP {step + 1} {loss.item()}", flush=True)
    if args.process_id == victim and step + 1 == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if args.process_id == noticed and step + 1 == notice_at:
        os.kill(os.getpid(), signal.SIGTERM)      # the cloud's notice, to this process only
    if manager.save(step + 1, {"model": model.state_dict(), "optim": opt.state_dict()}) and \
            manager.reached_preemption(step + 1):
        print(f"PREEMPTED {step + 1} {manager.all_steps()}", flush=True)
        break
if args.out and args.process_id == 0:
    torch.save([p.detach().cpu() for p in model.parameters()], args.out)
print("DONE", flush=True)
