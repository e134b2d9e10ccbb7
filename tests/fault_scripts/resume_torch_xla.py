"""resume_native.py as a PyTorch/XLA script (`python -m lazyxla.compat resume_torch_xla.py`):
torch_xla's CheckpointManager, xm.mark_step."""
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.experimental.distributed_checkpoint import CheckpointManager, prime_optimizer

from kill_points import arguments, make_model, train

args = arguments()

dev = torch_xla.device()
model = make_model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=0.05)
manager = CheckpointManager(args.ckpt, save_interval=args.interval, max_to_keep=2)
start = 0
if manager.all_steps():
    start = max(manager.all_steps())
    prime_optimizer(opt)
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    manager.restore(start, state)
    opt.load_state_dict(state["optim"])
print(f"START {start} {manager.all_steps()}", flush=True)
train(model, opt, dev, manager, start, args, barrier=xm.mark_step)
