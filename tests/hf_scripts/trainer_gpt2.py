"""An ordinary Hugging Face Trainer script (it never names lazyxla or torch_xla).

    python trainer_gpt2.py STEPS ACCUMULATION [--cpu] [--bf16] [--124m] [--no-nan-inf-filter]

Trains a tiny random-init GPT-2 on synthetic tokens, logging every step (with `--124m`:
GPT-2 small's shape, batches of 2 x 128 tokens as the bench's `gpt2-124m`, logging every
10 steps; with `--no-nan-inf-filter`: the Trainer's `logging_nan_inf_filter` off, so that no
loss is read at each micro-batch), and prints
the logged losses as `LOSSES [...]` and the model's device as `DEVICE ...`.
"""
import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

steps, accumulation = int(sys.argv[1]), int(sys.argv[2])
flags = sys.argv[3:]
torch.manual_seed(0)
# No dropout: the lazy device draws its own random streams, so runs with dropout differ.
if "--124m" in flags:   # GPT2Config's defaults are GPT-2 small's
    config, seq, batch, log_every = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), 128, 2, 10
else:
    config, seq, batch, log_every = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), 32, 4, 1
model = GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = torch.randint(0, config.vocab_size, (seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


losses = []


class KeepLosses(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            losses.append(logs["loss"])


args = TrainingArguments(output_dir="trainer-out", max_steps=steps, per_device_train_batch_size=batch,
                         gradient_accumulation_steps=accumulation, logging_steps=log_every, report_to=[],
                         save_strategy="no", learning_rate=1e-3, seed=0, disable_tqdm=True,
                         use_cpu="--cpu" in flags, bf16="--bf16" in flags,
                         logging_nan_inf_filter="--no-nan-inf-filter" not in flags)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[KeepLosses()]).train()
print("DEVICE", next(model.parameters()).device)
print("LOSSES", json.dumps(losses))
