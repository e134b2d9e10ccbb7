"""Train a small MLP for --steps AdamW steps with lx.spmd.CheckpointManager, resuming from
the latest committed checkpoint; --kill MODE:STEP kills this process with SIGKILL (see
kill_points.py); the final parameters go to --out. Run by tests/test_fault_kills.py."""
import torch

import lazyxla as lx
from kill_points import arguments, make_model, train

args = arguments()

dev = lx.device()
model = make_model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
manager = lx.spmd.CheckpointManager(args.ckpt, save_interval=args.interval, max_to_keep=2)
start = manager.restore_latest({"model": model.state_dict(), "optim": opt.state_dict()}, opt)
print(f"START {start} {manager.all_steps()}", flush=True)
train(model, opt, dev, manager, start, args)
