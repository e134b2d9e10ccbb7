"""PyTorch/XLA's FSDPv2 recipe, written for torch_xla, on a tiny random-init GPT-2:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 \\
        python -m lazyxla.compat examples/torch_xla_fsdp_v2_gpt2.py --steps 4

A global mesh with an "fsdp" axis (`xs.set_global_mesh`), the model wrapped in
`SpmdFullyShardedDataParallel` (each GPT2Block its own unit through
`transformer_auto_wrap_policy`, the logits sharded on "fsdp"), and the batches sharded
on "fsdp" by `MpDeviceLoader(input_sharding=xs.ShardingSpec(mesh, ("fsdp", None)))`,
which also runs the step barrier. `make_model` and `make_batches` are what
tests/test_fsdp_v2.py trains on the CPU to compare the losses.
"""
import argparse
import functools

import numpy as np
import torch
import torch.utils.data
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

import torch_xla
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2


def make_model(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def make_batches(seed: int, steps: int, batch: int = 8, seq: int = 16) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, 128, (steps * batch, seq), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=batch)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    xr.use_spmd()
    num_devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(num_devices), (num_devices, 1), ("fsdp", "model"))
    xs.set_global_mesh(mesh)

    def shard_output(output, mesh):
        # the inner units (GPT2Block) get it too: their output is the hidden states
        real = output if isinstance(output, torch.Tensor) else output.logits
        xs.mark_sharding(real, mesh, ("fsdp", None, None))

    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={GPT2Block})
    model = FSDPv2(make_model(args.seed), shard_output=shard_output, auto_wrap_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = pl.MpDeviceLoader(make_batches(args.seed, args.steps), torch_xla.device(),
                               input_sharding=xs.ShardingSpec(mesh, ("fsdp", None)))
    for step, (ids,) in enumerate(loader):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.8f}")


if __name__ == "__main__":
    main()
