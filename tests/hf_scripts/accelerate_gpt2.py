"""An ordinary accelerate training loop (it never names lazyxla or torch_xla).

    python accelerate_gpt2.py STEPS ACCUMULATION [--cpu]

Prints the losses as `LOSSES [...]` and the model's device as `DEVICE ...`.
"""
import json
import sys

import torch
from accelerate import Accelerator
from transformers import GPT2Config, GPT2LMHeadModel

steps, accumulation = int(sys.argv[1]), int(sys.argv[2])
accelerator = Accelerator(cpu="--cpu" in sys.argv[3:], gradient_accumulation_steps=accumulation)
torch.manual_seed(0)
config = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config)
tokens = torch.randint(0, 128, (steps * accumulation * 4, 32), generator=torch.Generator().manual_seed(0))
loader = torch.utils.data.DataLoader(tokens, batch_size=4, pin_memory=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
losses = []
model.train()
for batch in loader:
    with accelerator.accumulate(model):
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    losses.append(loss.item())
print("DEVICE", next(model.parameters()).device)
print("LOSSES", json.dumps(losses))
