"""transformers' own FSDPv2 path (`fsdp_config={"xla": True, "xla_fsdp_v2": True}`) on a
tiny random-init Llama, unchanged transformers, through lazyxla.compat:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 \\
        python -m lazyxla.compat examples/hf_trainer_fsdp_v2.py
    python examples/hf_trainer_fsdp_v2.py --cpu        # the same training, eager on the CPU

The Trainer sets the global mesh, wraps the model in SpmdFullyShardedDataParallel (each
LlamaDecoderLayer a unit) and shards the batches through MpDeviceLoader(input_sharding=...).
Two things are the user's (docs/models.md, "FSDPv2 through the Trainer"): transformers
(5.25, installed here) makes the LR scheduler before any optimizer when XLA FSDP is on and
refuses `optimizers=`, so `FSDPv2Trainer` makes the optimizer first; and its output
sharding knows only tensors, tuples and `CausalLMOutputWithPast` (Llama's, not GPT-2's).
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

CPU = "--cpu" in sys.argv


class FSDPv2Trainer(Trainer):
    """The Trainer with its optimizer made before the scheduler: with FSDP, transformers
    defers the optimizer until after wrapping the model, and for XLA FSDP never makes it."""

    def create_scheduler(self, num_training_steps, optimizer=None):
        if optimizer is None and self.optimizer is None:
            self.create_optimizer()
        return super().create_scheduler(num_training_steps, optimizer)


def main():
    if not CPU:
        import torch_xla.runtime as xr
        xr.use_spmd()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                                         bos_token_id=0, eos_token_id=0, pad_token_id=0))
    ids = torch.randint(0, 128, (32, 16), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row} for row in ids]
    fsdp = {} if CPU else dict(fsdp="full_shard", fsdp_config={"xla": True, "xla_fsdp_v2": True})
    args = TrainingArguments(output_dir="/tmp/lazyxla-hf-fsdp-v2", per_device_train_batch_size=8, max_steps=4,
                             learning_rate=1e-2, lr_scheduler_type="constant", logging_steps=1, report_to=[],
                             save_strategy="no", dataloader_drop_last=True, use_cpu=CPU, disable_tqdm=True, **fsdp)
    trainer = FSDPv2Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    for record in trainer.state.log_history:
        if "loss" in record:
            print(f"loss {record['loss']:.8f}")


if __name__ == "__main__":
    main()
