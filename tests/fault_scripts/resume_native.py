"""Train a small MLP for --steps AdamW steps with lx.spmd.CheckpointManager, resuming from
the latest committed checkpoint; --kill MODE:STEP kills this process with SIGKILL (see
kill_points.py); the final parameters go to --out. Run by tests/test_fault_kills.py."""
import argparse

import torch

import lazyxla as lx
from kill_points import arm, batch, make_model

ap = argparse.ArgumentParser()
ap.add_argument("--ckpt", required=True)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--interval", type=int, default=2)
ap.add_argument("--kill", default="")
ap.add_argument("--out", required=True)
args = ap.parse_args()

dev = lx.device()
model = make_model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
manager = lx.spmd.CheckpointManager(args.ckpt, save_interval=args.interval, max_to_keep=2)
start = manager.restore_latest({"model": model.state_dict(), "optim": opt.state_dict()}, opt)
print(f"START {start} {manager.all_steps()}", flush=True)
for step in range(start, args.steps):
    x, y = batch(step)
    loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
    loss.backward()
    opt.step()
    opt.zero_grad()
    arm(args.kill, step + 1)
    manager.save(step + 1, {"model": model.state_dict(), "optim": opt.state_dict()})
torch.save([p.detach().cpu() for p in model.parameters()], args.out)
