"""A PyTorch/XLA training script, written for torch_xla and left as it is:

    python -m lazyxla.compat examples/torch_xla_train.py --steps 10

runs it on lazyxla (lazyxla.compat stands in for torch_xla). It trains a small
MLP classifier with the usual PyTorch/XLA idioms: `torch_xla.device()`,
`xm.optimizer_step`, `xm.mark_step`, a step closure that logs the loss once the
step has run, and `met.metrics_report()` at the end.
"""
import argparse

import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    device = torch_xla.device()
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs, labels = torch.randn(64, 16), torch.randint(0, 4, (64,))
    model = model.to(device)
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def log(step, loss):
        xm.master_print(f"step {step} loss {loss.item():.8f}")

    model.train()
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.add_step_closure(log, args=(step, loss))
        xm.mark_step()

    xm.wait_device_ops()
    print(met.metrics_report())


if __name__ == "__main__":
    main()
