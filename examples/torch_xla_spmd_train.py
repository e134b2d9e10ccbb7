"""A PyTorch/XLA SPMD data-parallel training script, written for torch_xla:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 \\
        python -m lazyxla.compat examples/torch_xla_spmd_train.py --steps 5

`xr.use_spmd()`, a 1-D mesh over all devices, the batch sharded along it with
`xs.mark_sharding`, then the usual step (`xm.optimizer_step`, `xm.mark_step`).
It maps onto lazyxla.spmd (API.md "SPMD and many processes"); a lazyxla without
lazyxla.spmd stops at `xr.use_spmd()` with an error saying so.
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    xr.use_spmd()
    num_devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(num_devices), (num_devices,), ("data",))
    xs.set_global_mesh(mesh)

    device = torch_xla.device()
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs, labels = torch.randn(64, 16), torch.randint(0, 4, (64,))
    model = model.to(device)
    inputs, labels = inputs.to(device), labels.to(device)
    xs.mark_sharding(inputs, mesh, ("data", None))
    xs.mark_sharding(labels, mesh, ("data",))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    for step in range(args.steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
        xm.master_print(f"step {step} loss {loss.item():.8f}")


if __name__ == "__main__":
    main()
