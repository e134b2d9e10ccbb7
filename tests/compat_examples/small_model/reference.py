"""Test harness, not an upstream file: the small model the example runs use, and the
examples' training step (train_decoder_only_base.py's step_fn) on eager CPU torch.

    python reference.py STEPS    prints `step: N, loss: L` every 10 steps
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from decoder_only_model import DecoderOnlyConfig, DecoderOnlyModel  # noqa: E402

# The base script's flags: --hidden-size 64 --num-layers 2 --num-attention-heads 4
# --num-key-value-heads 2 --intermediate-size 128
SMALL = DecoderOnlyConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          intermediate_size=128)
FLAGS = ["--hidden-size", "64", "--num-layers", "2", "--num-attention-heads", "4", "--num-key-value-heads", "2",
         "--intermediate-size", "128"]
BATCH, SEQ = 16, 512   # fixed by train_decoder_only_base.py


def losses(steps: int) -> list:
    """The loss of every 10th step, as the examples print them (seed 42, Adam lr 1e-4,
    all-zero tokens and targets)."""
    torch.manual_seed(42)
    model = DecoderOnlyModel(SMALL)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0001)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    model.train()
    printed = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(data).view(-1, SMALL.vocab_size), data.view(-1))
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            printed.append(loss.item())
    return printed


if __name__ == "__main__":
    for i, loss in enumerate(losses(int(sys.argv[1]))):
        print(f"step: {10 * i}, loss: {loss}")
